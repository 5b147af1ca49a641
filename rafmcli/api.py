"""Python API in the style of scikit-learn: FM, RaFM and DiFacto estimators (regression,
classification, and implicit data: :class:`FMImplicit`).

    >>> from rafmcli.api import FMRegressor, read_data
    >>> X, y = read_data("data_samples/regression.train.libfm")
    >>> est = FMRegressor(model="rafm", ranks=(4, 16)).fit(X, y)
    >>> est.predict(X[:3])

Hyper-parameters are the fields of :class:`rafmcli.options.Options` (the one
table of defaults that ``rafm train`` reads); a parameter left at None takes
that table's value when ``fit`` runs, so the CLI and the API never disagree.
Models are the CLI's model files: ``est.save("m.rafm")`` is read by
``rafm predict --model m.rafm`` and :func:`load` reads what ``rafm train
--save-model`` wrote.

X may be a scipy.sparse matrix (CSR or CSC), a dense 2-D array, or the
reader's :class:`~rafmcli.io.reader.Dataset` (what ``read_data(...,
sparse=False)`` returns); column j is feature id j. Importing this module
loads neither numba nor scipy nor scikit-learn; numba compiles on the first
fit or predict.
"""

import dataclasses
import math
import numbers
import sys

import numpy as np

from rafmcli import options as table

INSTALL_HINT = "pip install 'rafm[api]'"


class NotFittedError(ValueError, AttributeError):
    """The estimator is used before ``fit`` (scikit-learn's contract: a ValueError and an AttributeError)."""


# Options of ``--task implicit`` only (Feat2Vec negative sampling): no regressor or classifier has them.
IMPLICIT_ONLY = ("negatives", "alpha1", "alpha2", "loss", "nce", "reject_positives", "regular_negatives",
                 "negative_groups", "eval_group", "eval_share", "top_k")


def _option_names():
    """The Options fields an estimator exposes: all but ``task`` (the class fixes it) and IMPLICIT_ONLY."""
    return [f.name for f in dataclasses.fields(table.Options) if f.name != "task" and f.name not in IMPLICIT_ONLY]


def _check_range(name, value, allowed=None):
    """Refuse (ValueError) a value of option ``name`` outside ``allowed`` (default: its range in
    options.RANGES), or a sequence (reg_factors, negative_groups) with one such value."""
    allowed = allowed or table.RANGES[name]
    kind = numbers.Integral if allowed.integer else numbers.Real
    many = np.ndim(value) > 0
    for v in value if many else (value,):
        if not (isinstance(v, kind) and not isinstance(v, bool) and (allowed.integer or math.isfinite(v))
                and (v > allowed.low if allowed.low_open else v >= allowed.low)
                and (allowed.high is None or (v < allowed.high if allowed.high_open else v <= allowed.high))):
            high = "inf)" if allowed.high is None else f"{allowed.high}{')' if allowed.high_open else ']'}"
            raise ValueError(f"{name} must be {'an integer' if allowed.integer else 'a number'} in "
                             f"{'(' if allowed.low_open else '['}{allowed.low}, {high}, not {v!r}"
                             + (f" (in {value!r})" if many else ""))


def _check_choice(name, value, allowed):
    if not (isinstance(value, str) and value in allowed):
        raise ValueError(f"{name} must be one of {', '.join(allowed)}, not {value!r}")


# ---- data ------------------------------------------------------------------------------------

def read_data(path, *, cache=True, sparse=True, n_features=None):
    """(X, y) from a libSVM/libFM file, through rafm's binary cache.

    ``sparse=True`` gives a ``scipy.sparse.csr_matrix`` with ``n_features``
    columns (default: largest id + 1); ``sparse=False`` gives the reader's
    Dataset, which needs no scipy and is passed to ``fit``/``predict`` as is.
    Bad input raises ValueError with the CLI's ``FILE:LINE: what (token)``.
    """
    from rafmcli.io.reader import read_dataset

    data = _checked(lambda: read_dataset(str(path), use_cache=cache))
    y = np.asarray(data.labels, dtype=np.float64)
    if not sparse:
        return data, y
    try:
        from scipy.sparse import csr_matrix
    except ImportError:
        raise ImportError(f"read_data(sparse=True) needs scipy: {INSTALL_HINT}, "
                          f"or read_data(path, sparse=False) for rafm's own Dataset") from None
    top = int(data.feature_ids[-1]) + 1 if data.feature_ids.shape[0] else 0
    width = top if n_features is None else int(n_features)
    if width < top:
        raise ValueError(f"{path}: feature id {top - 1} does not fit n_features={width}")
    return csr_matrix((data.row_values(), data.indices, data.indptr), shape=(data.n_rows, width)), y


def _checked(call):
    """Run ``call``; the CLI's one-line input errors become ValueError, divergence RuntimeError."""
    from rafmcli.errors import DivergedError, InputError

    try:
        return call()
    except InputError as exc:
        raise ValueError(exc.message) from None
    except DivergedError as exc:
        raise RuntimeError(exc.message) from None


def as_dataset(X):
    """The reader's Dataset for X (scipy sparse, dense 2-D, or a Dataset, whose labels are kept).

    Returns (a new Dataset, number of columns or None for a Dataset). Explicit
    zeros are dropped, as the reader drops them; labels are zeros.
    """
    from rafmcli.io.reader import Dataset, feature_counts

    if isinstance(X, Dataset):
        return Dataset(X.path, X.labels, X.indptr, X.indices, X.values, X.feature_ids, X.counts), None
    if _is_sparse(X):
        if X.dtype.kind == "c":
            raise ValueError("Complex data not supported")
        csr = X.tocsr(copy=True)
        csr.sum_duplicates()
        csr.eliminate_zeros()
        n_rows, n_cols = csr.shape
        indptr, indices, values = csr.indptr, csr.indices, np.asarray(csr.data, dtype=np.float64)
    else:
        dense = np.asarray(X)
        if dense.dtype.kind == "c":
            raise ValueError("Complex data not supported")
        if dense.dtype.kind not in "biuf":
            dense = dense.astype(np.float64)  # TypeError/ValueError name what is not a number
        if dense.ndim != 2:
            raise ValueError(f"X must be 2-D (rows x features), got {dense.ndim} dimension(s). Reshape your "
                             f"data with X.reshape(-1, 1) for a single feature or X.reshape(1, -1) for one row")
        n_rows, n_cols = dense.shape
        mask = dense != 0
        indptr = np.concatenate([[0], np.cumsum(mask.sum(axis=1))])
        indices = np.nonzero(mask)[1]
        values = dense[mask].astype(np.float64)
    if n_rows == 0:
        raise ValueError(f"Found array with 0 sample(s) (shape=({n_rows}, {n_cols})) while a minimum of 1 is required.")
    if n_cols == 0:
        raise ValueError(f"Found array with 0 feature(s) (shape=({n_rows}, {n_cols})) while a minimum of 1 is "
                         f"required.")
    if not np.all(np.isfinite(values)) or np.any(np.abs(values) > np.finfo(np.float32).max):
        raise ValueError("X holds NaN or infinite values (or values beyond float32)")
    indices = np.asarray(indices, dtype=np.int32)
    values = values.astype(np.float32)
    labels = np.zeros(n_rows)
    ids, counts = feature_counts(indices, n_cols - 1)
    return Dataset("<array>", labels, np.asarray(indptr, dtype=np.int64), indices,
                   None if np.all(values == 1) else values, ids, counts), n_cols


def _is_sparse(X):
    """A scipy.sparse matrix or array, recognised without importing scipy."""
    return hasattr(X, "tocsr") and hasattr(X, "nnz")


def _labels(y, n_rows):
    if y is None:
        raise ValueError("this estimator requires y to be passed, but the target y is None")
    y = np.asarray(y)
    if y.dtype.kind == "c":
        raise ValueError("Complex data not supported")
    if y.ndim == 2 and y.shape[1] == 1:
        import warnings

        warnings.warn("A column-vector y was passed when a 1d array was expected; it is read as shape "
                      "(n_samples,)", _conversion_warning(), stacklevel=3)
        y = y.ravel()
    if y.ndim != 1:
        raise ValueError(f"y must be 1-D, got shape {y.shape}")
    if y.shape[0] != n_rows:
        raise ValueError(f"X has {n_rows} rows but y has {y.shape[0]} labels")
    return y


def _conversion_warning():
    try:
        from sklearn.exceptions import DataConversionWarning
    except ImportError:
        return UserWarning
    return DataConversionWarning


# ---- estimators ------------------------------------------------------------------------------

class _FMEstimator:
    """What regressor and classifier share: parameters, fit, margins, files."""

    _task = None

    def __init__(self, model=None, ranks=None, method=None, iters=None, learn_rate=None, dependent_rate=None,
                 variant=None, dependent_weight=None, reg_bias=None, reg_linear=None, reg_factors=None,
                 init_stdev=None, bias=None, linear=None, seed=None, threads=None, early_stop=None,
                 metric=None, holdout=None, burn_in=None, keep_samples=None, keep_means=None, auto_groups=None,
                 shared_precision=None,
                 beta1=None, beta2=None, eps=None, levels=None, warm_start=False, verbose=False):
        self.model = model
        self.ranks = ranks
        self.method = method
        self.iters = iters
        self.learn_rate = learn_rate
        self.dependent_rate = dependent_rate
        self.variant = variant
        self.dependent_weight = dependent_weight
        self.reg_bias = reg_bias
        self.reg_linear = reg_linear
        self.reg_factors = reg_factors
        self.init_stdev = init_stdev
        self.bias = bias
        self.linear = linear
        self.seed = seed
        self.threads = threads
        self.early_stop = early_stop
        self.metric = metric
        self.holdout = holdout
        self.burn_in = burn_in
        self.keep_samples = keep_samples
        self.keep_means = keep_means
        self.auto_groups = auto_groups
        self.shared_precision = shared_precision
        self.beta1 = beta1
        self.beta2 = beta2
        self.eps = eps
        self.levels = levels
        self.warm_start = warm_start
        self.verbose = verbose

    # scikit-learn's parameter protocol, without importing scikit-learn
    @classmethod
    def _get_param_names(cls):
        import inspect

        return sorted(p for p in inspect.signature(cls.__init__).parameters if p != "self")

    def get_params(self, deep=True):
        return {name: getattr(self, name) for name in self._get_param_names()}

    def set_params(self, **params):
        valid = self._get_param_names()
        for name, value in params.items():
            if name not in valid:
                raise ValueError(f"invalid parameter {name!r} for {type(self).__name__}; valid: {', '.join(valid)}")
            setattr(self, name, value)
        return self

    def __repr__(self):
        shown = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items()
                          if v is not None and not (k in ("warm_start", "verbose") and v is False))
        return f"{type(self).__name__}({shown})"

    def __sklearn_tags__(self):
        from sklearn.utils import InputTags, Tags, TargetTags

        return Tags(estimator_type=None, target_tags=TargetTags(required=True),
                    input_tags=InputTags(sparse=True, allow_nan=False))

    def __setstate__(self, state):
        """Unpickled factors are put back on cache lines (the kernels' layout), and the
        parameters made writable, as training leaves them: joblib's ``load(mmap_mode="r")``
        maps them read-only, another numba type, which would compile every prediction
        kernel a second time."""
        self.__dict__.update(state)
        if "model_" in state:
            from rafmcli.model.layout import aligned_copy

            model, done = self.model_, {}  # done: an array shared by the model and a sample stays shared

            def copied(a, align):
                if id(a) not in done:
                    done[id(a)] = aligned_copy(a) if align else a if a.flags.writeable else np.array(a)
                return done[id(a)]

            model.V, model.w = copied(model.V, True), copied(model.w, False)
            model.samples = [(w0, copied(w, False), copied(V, True)) for w0, w, V in model.samples]

    # options
    def options(self):
        """The :class:`Options` a fit runs with: set parameters over the table's defaults.

        ``ranks`` left at None stays None here: ``fit`` chooses them from the training rows'
        frequency histogram (:func:`rafmcli.ranksets.choose`), as ``rafm train`` does without
        --ranks; and ``reg_factors`` and ``learn_rate`` left at None are raced on the validation
        rows (:func:`rafmcli.solvers.sgd.race`), as ``rafm train`` does without --regular and
        --learn-rate.
        """
        from rafmcli.metrics import names as metric_names

        given = {name: getattr(self, name) for name in _option_names() if getattr(self, name) is not None}
        for name, value in given.items():
            if name in table.RANGES:
                _check_range(name, value)
        for name, allowed in (("model", table.MODELS), ("method", table.METHODS), ("variant", table.VARIANTS),
                              ("metric", metric_names(self._task))):
            if name in given:
                _check_choice(name, given[name], allowed)
        if "seed" in given:
            given["seed"] = int(given["seed"]) % (1 << 64)  # as rafm train --seed: a negative s is s + 2^64
        model = given.get("model", table.DEFAULTS.model)
        ranks = self._ranks(given.pop("ranks", None), model)
        method = given.get("method", table.DEFAULTS.method)
        for name in table.METHOD_DEFAULTS.get(method, {}):  # per-method defaults (learning rate, als, mcmc)
            given.setdefault(name, table.method_default(method, name))
        reg = given.pop("reg_factors", table.DEFAULTS.reg_factors)
        reg = (reg,) if np.ndim(reg) == 0 else tuple(reg)
        opts = table.Options(task=self._task, ranks=ranks,
                             reg_factors=reg if ranks is None else table.per_level(reg, len(ranks)), **given)
        if opts.method == "mcmc" and opts.burn_in is not None and opts.burn_in >= opts.iters:
            raise ValueError(f"burn_in must be below iters ({opts.iters}), not {opts.burn_in}")
        return opts

    @staticmethod
    def _ranks(ranks, model):
        from rafmcli.levels import parse_ranks

        if ranks is None:
            return None
        if isinstance(ranks, str):
            ranks = parse_ranks(ranks)
        ranks = (int(ranks),) if np.ndim(ranks) == 0 else tuple(int(r) for r in ranks)
        parse_ranks(",".join(map(str, ranks)))  # positive, increasing
        if model == "fm" and len(ranks) > 1:
            raise ValueError(f"an FM has one rank, got ranks={ranks} (use model='rafm' or 'difacto')")
        return ranks

    def _from_data(self, opts, data):
        """``opts`` with the ranks ``rafm train`` would choose from ``data`` when none were given."""
        if opts.ranks is not None:
            return opts
        from rafmcli import ranksets

        choice = ranksets.choose(data.counts, data.n_rows, opts.model)
        if self.verbose:
            print(f"rafm: ranks {','.join(map(str, choice.ranks))}: {choice.why}; ranks= to choose",
                  file=sys.stderr)
        return dataclasses.replace(opts, ranks=choice.ranks,
                                   reg_factors=table.per_level(opts.reg_factors, len(choice.ranks)))

    def _levels_override(self, m):
        if self.levels is None:
            return None
        if isinstance(self.levels, dict):
            ids = np.fromiter(self.levels.keys(), dtype=np.int64)
            lv = np.fromiter(self.levels.values(), dtype=np.int64)
            if lv.size and (lv.min() < 1 or lv.max() > m):
                raise ValueError(f"levels must be 1..{m}")
            return ids, lv.astype(np.int8)
        from rafmcli.io.levels_file import read_levels_file

        return _checked(lambda: read_levels_file(str(self.levels), m))

    # fitting
    def _fit(self, X, y, eval_set):
        init = self.model_ if self.warm_start and hasattr(self, "model_") else None
        if init is not None:  # continue: the model's kind and ranks unless others were asked for
            from rafmcli.model import continued

            kind, ranks = _checked(lambda: continued.settle(
                init, f"{type(self).__name__} (warm start)", self._task, self.model,
                None if self.ranks is None else self._ranks(self.ranks, self.model or init.kind)))
            opts = type(self)(**{**self.get_params(), "model": kind, "ranks": ranks}).options()
        else:
            opts = self.options()
        data, n_cols = as_dataset(X)
        if y is None and n_cols is None:
            y = self._file_labels(data.labels)  # a Dataset: the labels of its file
        data.labels = self._fit_targets(y, data.n_rows)
        valid = None
        if eval_set is not None:
            pairs = [eval_set] if isinstance(eval_set, tuple) else list(eval_set)
            if len(pairs) != 1:
                raise ValueError("eval_set takes one (X, y) pair")
            Xv, yv = pairs[0]
            valid, _ = as_dataset(Xv)
            valid.labels = self._targets(yv, valid.n_rows)
        if valid is None and opts.holdout > 0:
            from rafmcli.solvers.sgd import holdout_split

            data, valid = holdout_split(data, opts.holdout, opts.seed)
        opts = self._from_data(opts, data)
        if init is not None:  # as rafm train --init-model: the rate and L2 the model was trained with
            from rafmcli.model.continued import trained_settings

            saved_rate, saved_regular = trained_settings(init, opts.method)
            if self.learn_rate is None and saved_rate is not None:
                opts = dataclasses.replace(opts, learn_rate=saved_rate)
            if self.reg_factors is None and saved_regular is not None:
                opts = dataclasses.replace(opts, reg_factors=tuple(saved_regular[2:]))
        from rafmcli.solvers.sgd import race_choices, train

        # as rafm train without --regular, --learn-rate (a race validates)
        plan = None if init is not None or valid is None else race_choices(
            data, opts, l2=self.reg_factors is None, rate=self.learn_rate is None)
        extra = {"init": init, "race_plan": plan}

        def echo(message):
            print(message, file=sys.stderr)

        if init is not None and opts.method == "sgda":
            raise ValueError(f"warm_start continues method {', '.join(table.STEP_METHODS)}, not sgda")
        if opts.method in ("als", "mcmc"):
            from rafmcli.solvers.coordinate import train as coordinate_train

            if init is not None:
                raise ValueError(f"warm_start continues method {', '.join(table.STEP_METHODS)}, not {opts.method}")
            extra = {}

            def train(*args, **kwargs):
                result = coordinate_train(*args, **kwargs)
                return result.model, result.history

        model, history = _checked(lambda: train(
            data, opts, validation=valid, levels_override=self._levels_override(len(opts.ranks)),
            quiet=not self.verbose, progress=self.verbose, echo=echo, **extra))
        self._keep(model, n_cols)
        self.history_ = history
        return self

    def _keep(self, model, n_cols):
        """Keep ``model``; its info (a saved file's header) records the classes and X's width ``n_cols``
        (None: unknown, a Dataset's)."""
        self.model_ = model
        if hasattr(self, "classes_"):
            model.info["classes"] = self.classes_.tolist()
        if n_cols is not None:
            model.info.setdefault("training", {})["n_features_in"] = n_cols
            self.n_features_in_ = n_cols
        elif "n_features_in_" in self.__dict__:
            del self.n_features_in_

    @staticmethod
    def _file_labels(labels):
        return labels

    def _fit_targets(self, y, n_rows):
        return self._targets(y, n_rows)

    def _targets(self, y, n_rows):
        """Labels as the kernels want them (regression: finite floats)."""
        y = _labels(y, n_rows)
        try:
            y = y.astype(np.float64)
        except (TypeError, ValueError):
            raise ValueError(f"Unknown label type: {type(self).__name__} needs numeric targets") from None
        if not np.all(np.isfinite(y)):
            raise ValueError("y holds NaN or infinite values")
        return y

    def _check_fitted(self):
        if not hasattr(self, "model_"):
            error = NotFittedError
            if "sklearn.exceptions" in sys.modules:  # what scikit-learn's tools catch
                error = sys.modules["sklearn.exceptions"].NotFittedError
            raise error(f"This {type(self).__name__} instance is not fitted yet: call fit first")

    def _margins(self, X, finished=False):
        """Raw scores y(x) for the rows of X; with ``finished``, predictions (an MCMC model: the
        mean of its draws' predictions, not the prediction of its mean score)."""
        self._check_fitted()
        from rafmcli.predict import predict_dataset

        data, n_cols = as_dataset(X)
        expected = getattr(self, "n_features_in_", None)
        dense = not (_is_sparse(X) or n_cols is None)  # sparse columns are matched by id
        if dense and expected is not None and n_cols != expected:
            raise ValueError(f"X has {n_cols} features, but {type(self).__name__} is expecting {expected} "
                             f"features as input")
        return predict_dataset(self.model_, data, raw=not finished).values

    # files
    def save(self, path, state=False):
        """Write the model file ``rafm predict --model`` reads (through a temporary file).

        ``state=True`` adds the optimizer state, so that a later warm start (or
        ``rafm train --init-model``) continues exactly where this fit stopped.
        """
        self._check_fitted()
        from rafmcli.model import files

        files.save(self.model_, str(path), state=state)
        return self

    @classmethod
    def load(cls, path):
        """An estimator around the model file ``path``, its parameters those it was trained with."""
        from rafmcli.model import files

        return cls._around(_checked(lambda: files.load(str(path))), path)

    @classmethod
    def _around(cls, model, path):
        want = "c" if issubclass(cls, FMClassifier) else "r"
        if model.task == "implicit":
            raise ValueError(f"{path}: an implicit model: load it with FMImplicit.load or rafmcli.api.load")
        if model.task != want:
            other = "FMClassifier" if model.task == "c" else "FMRegressor"
            raise ValueError(f"{path}: a {'classification' if model.task == 'c' else 'regression'} "
                             f"model: load it with {other}.load or rafmcli.api.load")
        trained = model.info.get("options", {})
        est = cls(**{k: (tuple(v) if isinstance(v, list) else v)
                     for k, v in trained.items() if k in _option_names()})
        if want == "c":
            est.classes_ = np.asarray(model.info.get("classes", [0, 1]))
        est._keep(model, _fitted_width(model, path))
        return est


class FMRegressor(_FMEstimator):
    """FM, RaFM or DiFacto for regression (square loss); predictions clipped to the training range.

    Parameters are those of ``rafm train`` (the fields of rafmcli.options.Options);
    None takes the table's default at fit time.
    """

    _task = "r"

    def fit(self, X, y=None, eval_set=None):
        """Train on X, y; ``eval_set=(X_val, y_val)`` for early stopping (else ``holdout``)."""
        return self._fit(X, y, eval_set)

    def predict(self, X):
        return self._margins(X, finished=True)

    def score(self, X, y):
        """R^2 of the predictions (scikit-learn's regressor score)."""
        y = np.asarray(y, dtype=np.float64)
        err = ((y - self.predict(X)) ** 2).sum()
        total = ((y - y.mean()) ** 2).sum()
        return 1.0 - err / total if total > 0 else (1.0 if err == 0 else 0.0)

    def __sklearn_tags__(self):
        from sklearn.utils import RegressorTags

        tags = super().__sklearn_tags__()
        tags.estimator_type = "regressor"
        tags.regressor_tags = RegressorTags()
        return tags


class FMClassifier(_FMEstimator):
    """FM, RaFM or DiFacto for binary classification (logistic loss).

    ``classes_`` are the two labels seen in fit; the larger is the positive
    class. Parameters as for :class:`FMRegressor`.
    """

    _task = "c"

    def fit(self, X, y=None, eval_set=None):
        """Train on X, y (two classes); ``eval_set=(X_val, y_val)`` for early stopping."""
        return self._fit(X, y, eval_set)

    @staticmethod
    def _file_labels(labels):
        return np.where(np.asarray(labels) > 0, 1, 0)  # > 0 is positive, as the CLI reads a file

    def _fit_targets(self, y, n_rows):
        y = _labels(y, n_rows)
        classes = np.unique(y)
        if y.dtype.kind == "f" and np.any(classes != np.round(classes)):
            raise ValueError("Unknown label type: continuous. FMClassifier needs two classes; "
                             "FMRegressor fits continuous targets")
        if classes.shape[0] > 2:
            raise ValueError(f"Only binary classification is supported. The type of the target is multiclass "
                             f"({classes.shape[0]} classes)")
        if classes.shape[0] < 2:
            raise ValueError(f"FMClassifier needs 2 classes in y, got {classes.shape[0]} class(es) "
                             f"{classes.tolist()}")
        if self.warm_start and hasattr(self, "model_") and not np.array_equal(classes, self.classes_):
            raise ValueError(f"a warm fit keeps the classes {self.classes_.tolist()} of the fitted model, not "
                             f"{classes.tolist()} (warm_start=False fits afresh)")
        self.classes_ = classes
        return self._targets(y, n_rows)

    def _targets(self, y, n_rows):
        y = _labels(y, n_rows)
        known = np.isin(y, self.classes_)
        if not known.all():
            raise ValueError(f"y holds labels not seen in fit: {np.unique(y[~known])[:5]}")
        return (y == self.classes_[1]).astype(np.float64)

    def decision_function(self, X):
        """Margins: log-odds of the positive class ``classes_[1]`` (``rafm predict --raw``; an MCMC
        model's mean margin, whose sign may differ from ``predict`` near P = 0.5)."""
        return self._margins(X)

    def predict_proba(self, X):
        """Rows of [P(classes_[0]), P(classes_[1])]."""
        p = self._margins(X, finished=True)
        return np.column_stack([1.0 - p, p])

    def predict(self, X):
        """The class ``predict_proba`` finds likelier: ``classes_[1]`` above 0.5, ``classes_[0]`` at or below."""
        positive = self.predict_proba(X)[:, 1] > 0.5
        return self.classes_[positive.astype(int)]

    def score(self, X, y):
        """Accuracy (scikit-learn's classifier score)."""
        return float(np.mean(self.predict(X) == np.asarray(y)))

    def __sklearn_tags__(self):
        from sklearn.utils import ClassifierTags

        tags = super().__sklearn_tags__()
        tags.estimator_type = "classifier"
        tags.classifier_tags = ClassifierTags(multi_class=False)
        return tags


class FMImplicit(_FMEstimator):
    """FM, RaFM or DiFacto learnt from positives only, as ``rafm train --task implicit``.

    Every row of X is a positive; negatives are Feat2Vec's (one group
    resampled per positive, see rafm-train(1)). ``groups`` gives each feature
    id its group: a sequence (``groups[n]`` is feature n's group, as line n
    of a libFM group file; ids beyond it form one more group), the path of a
    group file, or None for the fields of a libFFM file read with
    ``read_data(path, sparse=False)``. The implicit parameters (negatives,
    alpha1, alpha2, loss, nce, reject_positives, regular_negatives, negative_groups,
    eval_group, eval_share, top_k) are those of ``rafm train``, None taking its defaults.

        >>> est = FMImplicit(groups="data_samples/implicit.meta", model="fm", ranks=8, eval_group=1)
        >>> est.fit(X)                      # rows: user, item with its genres, hour
        >>> names, scores = est.recommend(X_users, group=1, k=5, exclude_seen=X)
        >>> names, vectors = est.embeddings(group=1)
    """

    _task = "implicit"

    def __init__(self, groups=None, negatives=None, alpha1=None, alpha2=None, loss=None, nce=None,
                 reject_positives=None, regular_negatives=None, negative_groups=None, eval_group=None,
                 eval_share=None, top_k=None, model=None, ranks=None, method=None, iters=None, learn_rate=None,
                 dependent_rate=None,
                 variant=None, dependent_weight=None, reg_bias=None, reg_linear=None, reg_factors=None,
                 init_stdev=None, bias=None, linear=None, seed=None, threads=None, early_stop=None,
                 holdout=None, beta1=None, beta2=None, eps=None, levels=None, warm_start=False, verbose=False):
        super().__init__(model=model, ranks=ranks, method=method, iters=iters, learn_rate=learn_rate,
                         dependent_rate=dependent_rate, variant=variant, dependent_weight=dependent_weight,
                         reg_bias=reg_bias, reg_linear=reg_linear, reg_factors=reg_factors, init_stdev=init_stdev,
                         bias=bias, linear=linear, seed=seed, threads=threads, early_stop=early_stop,
                         holdout=holdout, beta1=beta1, beta2=beta2, eps=eps, levels=levels,
                         warm_start=warm_start, verbose=verbose)
        self.groups = groups
        self.negatives = negatives
        self.alpha1 = alpha1
        self.alpha2 = alpha2
        self.loss = loss
        self.nce = nce
        self.reject_positives = reject_positives
        self.regular_negatives = regular_negatives
        self.negative_groups = negative_groups
        self.eval_group = eval_group
        self.eval_share = eval_share
        self.top_k = top_k

    def options(self):
        """The Options of ``rafm train --task implicit`` with these parameters."""
        if self.method is not None and self.method not in table.STEP_METHODS:
            raise ValueError(f"implicit training uses method {', '.join(table.STEP_METHODS)}, not {self.method!r}")
        opts = super().options()
        given = {name: getattr(self, name) for name in IMPLICIT_ONLY if getattr(self, name) is not None}
        for name, value in given.items():
            if name in table.RANGES:
                _check_range(name, value)
        if "negative_groups" in given:
            given["negative_groups"] = tuple(sorted({int(g) for g in np.atleast_1d(given["negative_groups"])}))
        if "loss" in given:
            _check_choice("loss", given["loss"], ranking_losses())
        return dataclasses.replace(opts, **given)

    def _feature_groups(self, data):
        from rafmcli.io.groups import FieldGroups, Groups, read_groups

        if self.groups is None:
            fields = FieldGroups.of(data)
            if fields is None:
                raise ValueError("FMImplicit needs feature groups: groups=[group of feature 0, 1, ...], the "
                                 "path of a libFM group file, or a libFFM file read with read_data(sparse=False)")
            return fields
        if isinstance(self.groups, (str, bytes)) or hasattr(self.groups, "__fspath__"):
            return _checked(lambda: read_groups(str(self.groups)))
        of_id = np.asarray(self.groups)
        if of_id.ndim != 1 or of_id.shape[0] == 0 or of_id.dtype.kind not in "iu" or of_id.min() < 0:
            raise ValueError("groups must be a non-empty 1-D sequence of non-negative integers (a feature's group)")
        return Groups("<groups>", of_id.astype(np.int32), int(of_id.max()) + 1)

    def fit(self, X, y=None, eval_set=None):
        """Train on the positive rows of X; ``eval_set``: held-out positives (X_val, or (X_val, y))
        for early stopping, else ``holdout`` of X. A y, if given, must be > 0 everywhere."""
        if self.warm_start and hasattr(self, "model_"):
            raise ValueError("warm_start continues r and c models; implicit ones start afresh")
        opts = self.options()
        data, n_cols = as_dataset(X)
        if y is not None and not np.all(_labels(y, data.n_rows) > 0):
            raise ValueError("implicit data holds positives only: every label must be > 0")
        groups = self._feature_groups(data)
        valid = None
        if eval_set is not None:
            valid, _ = as_dataset(eval_set[0] if isinstance(eval_set, tuple) else eval_set)
        elif opts.holdout > 0:
            from rafmcli.solvers.sgd import holdout_split

            data, valid = holdout_split(data, opts.holdout, opts.seed)
        opts = self._from_data(opts, data)
        from rafmcli.solvers.implicit import train

        def echo(message):
            print(message, file=sys.stderr)

        model, history = _checked(lambda: train(
            data, groups, opts, validation=valid, levels_override=self._levels_override(len(opts.ranks)),
            quiet=not self.verbose, progress=self.verbose, echo=echo))
        self._keep(model, n_cols)
        self.history_ = history
        return self

    def decision_function(self, X):
        """Raw scores y(x) of the rows of X (what ``rafm predict`` writes for an implicit model)."""
        return self._margins(X)

    predict = decision_function

    def _group(self, group):
        vocab = self.model_.vocabulary
        if not (0 <= int(group) < vocab.n_groups and (vocab.group_of == int(group)).any()):
            raise ValueError(f"group {group} has no features in the model")
        return int(group)

    def recommend(self, X, group, k=10, exclude_seen=None):
        """For each row of X (a context), the k values of ``group`` seen in training that score
        best substituted into it, as ``rafm recommend``: (names, scores), names a list per row of
        the values' feature ids joined by commas, scores [n, k'] (NaN past a row's candidates), k' =
        min(k, the group's values).
        ``exclude_seen``: rows (e.g. the training X) whose values of ``group`` are left out for
        rows with the same context."""
        from rafmcli import ranking
        from rafmcli.embeddings import value_names
        from rafmcli.predict import kernel_rows

        self._check_fitted()
        _check_range("k", k, table.RANGES["top_k"])  # rafm recommend -k
        group, model = self._group(group), self.model_
        seen = None
        if exclude_seen is not None:
            seen = model.vocabulary.lookup(kernel_rows(model, as_dataset(exclude_seen)[0]))
        ctx = ranking.contexts(model.vocabulary, kernel_rows(model, as_dataset(X)[0]), group, seen)
        ids, scores = ranking.recommend(model, ctx, int(k))
        labels = value_names(model, np.unique(ids[ids >= 0]))
        names = [[labels[int(i)] for i in row if i >= 0] for row in ids]
        return names, np.where(ids >= 0, scores, np.nan)

    def embeddings(self, level="all", group=None):
        """(names, vectors) as ``rafm embed`` writes them: every feature, or with ``group`` its
        values (each the sum of its features' vectors); ``level`` N or "all"."""
        from rafmcli.embeddings import embeddings, value_embeddings

        self._check_fitted()
        level = None if level == "all" else int(level)
        try:
            emb = embeddings(self.model_, level) if group is None else \
                value_embeddings(self.model_, level, self._group(group))
        except ValueError as exc:
            raise ValueError(str(exc)) from None
        return emb.names(), emb.vectors

    @classmethod
    def _around(cls, model, path):
        if model.task != "implicit":
            raise ValueError(f"{path}: not an implicit model: load it with rafmcli.api.load")
        trained = model.info.get("options", {})
        names = set(cls._get_param_names())
        est = cls(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in trained.items() if k in names})
        est._keep(model, _fitted_width(model, path))
        return est


def _fitted_width(model, path):
    """The columns of the X the API fitted the model of file ``path`` on (its info); None if not recorded."""
    width = model.info.get("training", {}).get("n_features_in")
    if width is not None and not (isinstance(width, int) and not isinstance(width, bool) and width > 0):
        raise ValueError(f"{path}: damaged model file (header 'training' 'n_features_in' must be a positive "
                         f"integer: {width!r})")
    return width


def ranking_losses():
    from rafmcli.ranking import LOSSES

    return tuple(LOSSES)


def load(path):
    """The estimator (FMRegressor, FMClassifier or FMImplicit, by the file's task) around a model file."""
    from rafmcli.model import files

    model = _checked(lambda: files.load(str(path)))
    kind = {"c": FMClassifier, "implicit": FMImplicit}.get(model.task, FMRegressor)
    return kind._around(model, path)


__all__ = ["FMRegressor", "FMClassifier", "FMImplicit", "read_data", "load", "as_dataset", "NotFittedError"]
