"""SGD with adaptive regularisation (Rendle, WSDM 2012; libFM's SGDA) for FM, RaFM and DiFacto.

Each training row takes an SGD step on its loss with L2 weights lam per
group (linear weights) and per group, level and factor coordinate:
theta' = theta - lr (g h + lam theta), g = dL/dy_hat, h = dy_hat/dtheta (the
coordinate's h of :mod:`rafmcli.kernels.coordinate`; every parameter, RaFM's
dependent ones too, follows the model's loss). The step's loss gradient g h
is kept per parameter. Then one validation row takes a step on the
regularisation: its loss at theta' = theta - lr (g h + lam theta) depends on
lam through dtheta'/dlam = -lr theta, so

    dL_val/dlam_c = L'(y_hat'(x_val)) Sum_{theta of class c in the row} h'(theta') (-lr theta),

and lam_c moves by -lr times that, kept >= 0 (libFM's sgd_lambda_step, with
h' the model's h at theta'). Regression clips y_hat to the target range as
libFM does; classification uses the logistic loss.

Kernels are free of I/O; tunables arrive as arguments (numba freezes globals).
"""

import numpy as np
from numba import njit

from rafmcli.kernels.coordinate import coordinate_h
from rafmcli.kernels.forward import sigmoid

TASK_REGRESSION = 0
TASK_CLASSIFICATION = 1


@njit(cache=True, error_model="numpy")
def row_sums(a, b, indices, values, layout, gV, lam_v, group, step, S, T, Q, R):
    """Level sums of one row at theta' = theta - step (gV + lam theta) (step 0: at theta).

    S, T are [level offset + f] (T over F_{l+1}), Q, R their squared terms.
    Returns the row's pairwise part.
    """
    lev, widths, offsets, coff, nested, V = layout
    m = widths.shape[0]
    has_values = values.shape[0] > 0
    S[:] = 0.0
    T[:] = 0.0
    Q[:] = 0.0
    R[:] = 0.0
    for k in range(a, b):
        i = indices[k]
        x = np.float64(values[k]) if has_values else 1.0
        g = group[i]
        for l in range(lev[i] + 1):
            base = offsets[l] + i * widths[l]
            dep = nested and l < lev[i]
            for f in range(widths[l]):
                v = np.float64(V[base + f])
                if step != 0.0:
                    v -= step * (gV[base + f] + lam_v[g, coff[l] + f] * v)
                vx = v * x
                S[coff[l] + f] += vx
                Q[l] += vx * vx
                if dep:
                    T[coff[l] + f] += vx
                    R[l] += vx * vx
    total = 0.0
    for l in range(m):
        ss = 0.0
        tt = 0.0
        for f in range(widths[l]):
            ss += S[coff[l] + f] * S[coff[l] + f]
            tt += T[coff[l] + f] * T[coff[l] + f]
        total += 0.5 * (ss - Q[l])
        if nested and l + 1 < m:
            total -= 0.5 * (tt - R[l])
    return total


@njit(cache=True, error_model="numpy", inline="always")
def loss_gradient(y_hat, y, task, ymin, ymax):
    """(dL/dy_hat, L): square loss on the clipped prediction, or the logistic loss (label > 0 positive)."""
    if task == TASK_REGRESSION:
        p = min(max(y_hat, ymin), ymax)
        return p - y, (p - y) * (p - y)
    s = 1.0 if y > 0 else -1.0
    z = -s * y_hat
    return -s * sigmoid(z), max(z, 0.0) + np.log1p(np.exp(-abs(z)))


@njit(cache=True, error_model="numpy")
def sgda_epoch(order, train, valid, vstart, layout, params, grads, group, lam_w, lam_v, hyper, adapt):
    """One pass over ``order``: a step on each training row, then (``adapt``) one on the
    regularisation from validation row ``vstart``, ``vstart + 1``, ... (cycling).

    ``train``, ``valid`` = (indptr, indices, values, labels); ``layout`` =
    (lev, widths, offsets, coff, nested, V); ``params`` = (w, w0 [1]);
    ``grads`` = (gw, gV): the last loss gradient of every parameter;
    ``hyper`` = (lr, task, ymin, ymax, bias_on, linear_on). Returns
    (summed training loss, next validation row).
    """
    indptr, indices, values, labels = train
    vindptr, vindices, vvalues, vlabels = valid
    lev, widths, offsets, coff, nested, V = layout
    w, w0 = params
    gw, gV = grads
    lr, task, ymin, ymax, bias_on, linear_on = hyper
    task = int(task)
    m = widths.shape[0]
    n_coords = coff[m]
    S = np.empty(n_coords)
    T = np.empty(n_coords)
    Q = np.empty(m)
    R = np.empty(m)
    dlam_w = np.zeros(lam_w.shape[0])
    dlam_v = np.zeros(lam_v.shape)
    n_valid = vindptr.shape[0] - 1
    vr = vstart
    total = 0.0
    for pos in range(order.shape[0]):
        r = order[pos]
        a, b = indptr[r], indptr[r + 1]
        has_values = values.shape[0] > 0
        lin = w0[0]
        for k in range(a, b):
            lin += w[indices[k]] * (np.float64(values[k]) if has_values else 1.0)
        y_hat = lin + row_sums(a, b, indices, values, layout, gV, lam_v, group, 0.0, S, T, Q, R)
        g, loss = loss_gradient(y_hat, labels[r], task, ymin, ymax)
        total += loss
        w0[0] -= lr * bias_on * g
        for k in range(a, b):
            i = indices[k]
            x = np.float64(values[k]) if has_values else 1.0
            gi = group[i]
            gw[i] = g * x
            w[i] -= lr * linear_on * (gw[i] + lam_w[gi] * w[i])
            for l in range(lev[i] + 1):
                base = offsets[l] + i * widths[l]
                dep = nested and l < lev[i]
                for f in range(widths[l]):
                    v = np.float64(V[base + f])
                    gV[base + f] = g * coordinate_h(x, S[coff[l] + f], T[coff[l] + f], v, dep)
                    V[base + f] = v - lr * (gV[base + f] + lam_v[gi, coff[l] + f] * v)
        if not adapt or n_valid == 0:
            continue
        # the regularisation step on one validation row, at theta' (module notes)
        a, b = vindptr[vr], vindptr[vr + 1]
        vhas = vvalues.shape[0] > 0
        lin = w0[0]  # the bias is not regularised: theta' = theta for it (libFM's predict_scaled)
        for k in range(a, b):
            i = vindices[k]
            x = np.float64(vvalues[k]) if vhas else 1.0
            wd = w[i] - lr * linear_on * (gw[i] + lam_w[group[i]] * w[i])
            lin += wd * x
        y_val = lin + row_sums(a, b, vindices, vvalues, layout, gV, lam_v, group, lr, S, T, Q, R)
        gl = loss_gradient(y_val, vlabels[vr], task, ymin, ymax)[0]
        for k in range(a, b):
            i = vindices[k]
            x = np.float64(vvalues[k]) if vhas else 1.0
            gi = group[i]
            dlam_w[gi] += x * (-lr * linear_on * w[i])
            for l in range(lev[i] + 1):
                base = offsets[l] + i * widths[l]
                dep = nested and l < lev[i]
                for f in range(widths[l]):
                    v = np.float64(V[base + f])
                    vd = v - lr * (gV[base + f] + lam_v[gi, coff[l] + f] * v)
                    dlam_v[gi, coff[l] + f] += coordinate_h(x, S[coff[l] + f], T[coff[l] + f], vd, dep) * (-lr * v)
        for k in range(a, b):  # apply and clear the touched entries
            gi = group[vindices[k]]
            if dlam_w[gi] != 0.0:
                lam_w[gi] = max(0.0, lam_w[gi] - lr * gl * dlam_w[gi])
                dlam_w[gi] = 0.0
            for c in range(n_coords):
                if dlam_v[gi, c] != 0.0:
                    lam_v[gi, c] = max(0.0, lam_v[gi, c] - lr * gl * dlam_v[gi, c])
                    dlam_v[gi, c] = 0.0
        vr = vr + 1 if vr + 1 < n_valid else 0
    return total, vr
