"""MCMC, ALS and SGDA on MovieLens 100K (split u1), side by side with AdaGrad and libFM.

    python3 bench/bench_bayes.py [--libfm PATH] [--section accuracy|speed|click|samples|groups ...]

Data as bench/ml100k.py builds it (../shared/datasets/ml-100k, or $RAFM_ML100K):
u1.base to train, u1.test to score; "ids" is user and item one-hot, "side" adds
age, gender, occupation, zip and genres, with a --meta file of 7 groups.
libFM runs only when given (--libfm PATH or $LIBFM: a libFM binary built from
github.com/srendle/libfm; this script never builds it).

* accuracy: test RMSE of every method, 200 iterations for MCMC (rafm and
  libFM; the headline rows mean +- sd over seeds 1, 2, 3, the others seed 1);
  ALS, SGDA and AdaGrad stop early on 10% of u1.base held out (libFM's ALS
  and SGDA run 100 iterations; SGDA learns on that 10%). "c 0" rows switch
  off RaFM's distillation term (--dependent-weight 0). Without --meta, rafm infers the
  feature groups from the rows (one-hot fields: users and items with ids only);
  "1 group" rows switch that off (--no-auto-groups), as libFM without -meta; the groups share
  their prior precisions, "own prec" rows give each group its own (--group-precision, libFM's).
* speed: seconds per MCMC iteration, FM rank 8 and 32 (ids), rafm on 1 and 2
  threads and libFM, each in a fresh process, side by side.
* click: the rating >= 4 task, MCMC (probit) against AdaGrad: logloss, AUC.
* samples: what --keep-samples K costs (model file size) and gives (test
  RMSE of the saved model against the whole chain's average).
* groups: data_samples/ (3,000 rows), MCMC with the inferred groups and shared
  precisions, with --group-precision and with one group; libFM without and with
  the true fields as -meta.
"""

import os
import subprocess
import sys
import tempfile
import time

import click
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import ml100k  # noqa: E402  (bench/ml100k.py: the data)

ITERS = 200
SEEDS = (1, 2, 3)
SECTIONS = ("accuracy", "speed", "click", "samples", "groups")


def files(kind):
    """{"train", "test", "meta"} paths for "ids", "side" or the click labels of those."""
    base = ml100k.convert(ids_only=kind.startswith("ids"))
    if not kind.endswith("click"):
        return base
    out = {"meta": base["meta"]}
    for split in ("train", "test"):
        out[split] = base[split].replace(".libfm", ".click.libfm")
        if not os.path.exists(out[split]):
            with open(base[split]) as src, open(out[split], "w") as dst:
                for line in src:
                    label, rest = line.split(" ", 1)
                    dst.write(f"{int(float(label) >= 4)} {rest}")
    return out


def holdout_files(kind):
    """u1.base split 90/10 (rafm's hold-out rows, seed 1) as files, for libFM's ALS and SGDA."""
    from rafmcli.io.reader import read_dataset
    from rafmcli.solvers.sgd import holdout_split

    paths = files(kind)
    out = {s: paths["train"].replace(".train.", f".{s}90.") for s in ("train", "valid")}
    if not all(os.path.exists(p) for p in out.values()):
        data = read_dataset(paths["train"])
        rows = np.random.default_rng(1).permutation(data.n_rows)
        cut = int(round(0.1 * data.n_rows))
        with open(paths["train"]) as fh:
            lines = fh.readlines()
        for name, picked in (("train", np.sort(rows[cut:])), ("valid", np.sort(rows[:cut]))):
            with open(out[name], "w") as fh:
                fh.writelines(lines[r] for r in picked)
        assert holdout_split(data, 0.1, 1)[1].n_rows == cut
    return out


def rafm(kind, *args, task="r", seed=1):
    """Run `rafm train` in a fresh process on ``kind``'s files; return (test predictions, seconds)."""
    paths = files(kind)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "p.txt")
        cmd = [sys.executable, "-m", "rafmcli", "train", "--task", task, "--train", paths["train"],
               "--test", paths["test"], "--out", out, "--seed", str(seed), "--quiet", *map(str, args)]
        start = time.perf_counter()
        subprocess.run(cmd, check=True)
        return np.loadtxt(out), time.perf_counter() - start


def libfm(binary, kind, *args, task="r", train=None):
    """Run libFM (on ``train`` instead of u1.base when given); return (test predictions, seconds)."""
    paths = files(kind)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "p.txt")
        cmd = [binary, "-task", task, "-train", train or paths["train"], "-test", paths["test"], "-out", out,
               *map(str, args)]
        start = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        return np.loadtxt(out), time.perf_counter() - start


def labels(kind):
    from rafmcli.io.reader import read_dataset

    return read_dataset(files(kind)["test"]).labels


def rmse(kind, predictions):
    return float(np.sqrt(np.mean((predictions - labels(kind)) ** 2)))


def adagrad_point(kind, model, ranks, task="r"):
    """AdaGrad's learning rate and L2 for ``model``, chosen on the 10% hold-out (ml100k.py's grid)."""
    from rafmcli.io.reader import read_dataset
    from rafmcli.options import Options
    from rafmcli.solvers.sgd import holdout_split, train

    tr, va = holdout_split(read_dataset(files(kind)["train"]), 0.1, 1)
    watch = "rmse" if task == "r" else "logloss"
    best = None
    for point in ml100k.GRID:
        opts = Options(task=task, model=model, ranks=ranks, method="adagrad", iters=300, early_stop=5, **point)
        m, _ = train(tr, opts, validation=va, quiet=True, progress=False)
        score = m.info["training"]["validation"][watch]
        if best is None or score < best[0]:
            best = (score, point)
    return best[1]


def shown_rmse(values):
    """'0.9071 +- 0.0008' over seeds, or one value."""
    if len(values) == 1:
        return f"{values[0]:.4f}"
    return f"{np.mean(values):.4f} +- {np.std(values, ddof=1):.4f}"


def accuracy(binary):
    print(f"ml-100k u1: test RMSE; MCMC {ITERS} iterations (burn-in {ITERS // 10}), init stdev 0.1; ALS, "
          f"SGDA and AdaGrad early-stopped on 10% of u1.base; seconds: one run, wall clock, shared machine")
    print(f"{'tool':<6}{'model':<16}{'data':<11}{'method':<16}{'test RMSE':>18}{'seeds':>7}{'seconds':>9}")
    c0 = ("--dependent-weight", 0)
    one = ("--no-auto-groups",)
    own = ("--group-precision",)
    rows = [
        ("fm", "8", "ids", "mcmc", (), SEEDS), ("fm", "32", "ids", "mcmc", (), SEEDS),
        ("rafm", "8,32", "ids", "mcmc", (), SEEDS), ("rafm", "16,32", "ids", "mcmc", (), SEEDS),
        ("fm", "32", "ids", "mcmc 1 group", one, (1,)), ("rafm", "8,32", "ids", "mcmc 1 group", one, (1,)),
        ("fm", "32", "ids", "mcmc own prec", own, (1,)), ("rafm", "8,32", "ids", "mcmc own prec", own, (1,)),
        ("rafm", "8,32", "ids", "mcmc c 0", c0, (1,)),
        ("rafm", "32,128", "ids", "mcmc", (), (1,)), ("rafm", "32,128", "ids", "mcmc c 0", c0, (1,)),
        ("difacto", "8,32", "ids", "mcmc", (), (1,)),
        ("fm", "32", "ids+meta", "mcmc", (), (1,)), ("rafm", "8,32", "ids+meta", "mcmc", (), (1,)),
        ("fm", "32", "side", "mcmc", (), (1,)), ("rafm", "8,32", "side", "mcmc", (), (1,)),
        ("fm", "32", "side", "mcmc 1 group", one, (1,)), ("rafm", "8,32", "side", "mcmc 1 group", one, (1,)),
        ("fm", "32", "side", "mcmc own prec", own, (1,)), ("rafm", "8,32", "side", "mcmc own prec", own, (1,)),
        ("fm", "8", "side+meta", "mcmc", (), (1,)), ("fm", "32", "side+meta", "mcmc", (), SEEDS),
        ("rafm", "8,32", "side+meta", "mcmc", (), SEEDS),
        ("fm", "8", "ids", "als", (), (1,)), ("fm", "32", "ids", "als", (), (1,)),
        ("rafm", "8,32", "ids", "als", (), (1,)),
        ("fm", "8", "ids", "sgda", ("--learn-rate", 0.01), (1,)),
        ("rafm", "8,32", "ids", "sgda", ("--learn-rate", 0.01), (1,)),
        ("fm", "8", "ids", "adagrad", None, (1,)), ("rafm", "8,32", "ids", "adagrad", None, (1,)),
    ]
    for model, ranks, data, method, extra, seeds in rows:
        kind = data.split("+")[0]
        args = ["--model", model, "--ranks", ranks, "--method", method.split()[0]]
        if "meta" in data:
            args += ["--meta", files(kind)["meta"]]
        if method.startswith("mcmc"):
            args += ["--iter", ITERS]
        elif method == "adagrad":
            point = adagrad_point(kind, model, tuple(map(int, ranks.split(","))))
            extra = ("--learn-rate", point["learn_rate"], "--regular", f"0,0,{point['reg_factors'][0]}")
            method = f"adagrad lr {point['learn_rate']:g}"
        else:
            args += ["--iter", 300]
        scores = []
        for seed in seeds:
            predictions, seconds = rafm(kind, *args, *extra, seed=seed)
            scores.append(rmse(kind, predictions))
        print(f"{'rafm':<6}{model + ' ' + ranks:<16}{data:<11}{method:<16}{shown_rmse(scores):>18}{len(seeds):>7}"
              f"{seconds:>9.1f}", flush=True)
    if not binary:
        return
    split = holdout_files("ids")
    for dim, data, method, extra, seeds in (
            (8, "ids", "mcmc", (), SEEDS), (32, "ids", "mcmc", (), SEEDS), (8, "side+meta", "mcmc", (), (1,)),
            (32, "side+meta", "mcmc", (), SEEDS), (8, "ids", "als", ("-regular", "0,10,10"), (1,)),
            (32, "ids", "als", ("-regular", "0,10,10"), (1,)),
            (8, "ids", "sgda", ("-learn_rate", 0.01, "-validation", split["valid"]), (1,))):
        kind = data.split("+")[0]
        args = ["-dim", f"1,1,{dim}", "-method", method, "-init_stdev", 0.1,
                "-iter", ITERS if method == "mcmc" else 100]
        if "meta" in data:
            args += ["-meta", files(kind)["meta"]]
        train = split["train"] if method == "sgda" else None  # SGDA learns its regularisation on the rest
        scores = []
        for seed in seeds:
            predictions, seconds = libfm(binary, kind, *args, *extra, "-seed", seed, train=train)
            scores.append(rmse(kind, predictions))
        print(f"{'libFM':<6}{'fm ' + str(dim):<16}{data:<11}{method:<16}{shown_rmse(scores):>18}{len(seeds):>7}"
              f"{seconds:>9.1f}", flush=True)


def groups(binary):
    """data_samples/ (3,000 training rows; five one-hot fields and a numeric column), MCMC at the
    default ranks: the inferred groups with shared precisions (default), with each group's own
    precision (--group-precision, libFM's priors) and one group; libFM FM 32 without and with the
    true fields as -meta."""
    from rafmcli.metrics import evaluate
    from rafmcli.synth import SAMPLE_FIELDS

    root = os.path.dirname(HERE)
    print(f"data_samples: MCMC {ITERS} iterations, test RMSE (regression) / logloss (classification), "
          f"mean +- sd over seeds {', '.join(map(str, SEEDS))}")
    print(f"{'tool':<6}{'model':<16}{'data':<16}{'groups':<34}{'test':>18}")
    variants = (("inferred, shared precision", ()), ("inferred, --group-precision", ("--group-precision",)),
                ("one (--no-auto-groups)", ("--no-auto-groups",)))
    with tempfile.TemporaryDirectory() as tmp:
        for task, name in (("r", "regression"), ("c", "classification")):
            base = os.path.join(root, "data_samples", name)
            truth = np.array([float(line.split(" ", 1)[0]) for line in open(base + ".test.libfm")
                              if not line.startswith("#")])
            metric = "rmse" if task == "r" else "logloss"
            for model, ranks in (("fm", "32"), ("rafm", "8,32"), ("difacto", "8,32")):
                for shown, extra in variants:
                    scores = []
                    for seed in SEEDS:
                        out = os.path.join(tmp, "p.txt")
                        subprocess.run([sys.executable, "-m", "rafmcli", "train", "--task", task, "--train",
                                        base + ".train.libfm", "--test", base + ".test.libfm", "--out", out,
                                        "--model", model, "--ranks", ranks, "--method", "mcmc", "--iter",
                                        str(ITERS), "--seed", str(seed), "--quiet", *extra], check=True)
                        scores.append(evaluate(task, truth, np.loadtxt(out))[metric])
                    print(f"{'rafm':<6}{model + ' ' + ranks:<16}{name:<16}{shown:<34}{shown_rmse(scores):>18}",
                          flush=True)
            if not binary:
                continue
            plain = {}
            for split in ("train", "test"):  # libFM reads no comment lines
                plain[split] = os.path.join(tmp, f"{name}.{split}.libfm")
                with open(base + f".{split}.libfm") as src, open(plain[split], "w") as dst:
                    dst.writelines(line for line in src if not line.startswith("#"))
            meta = os.path.join(tmp, "fields.meta")
            with open(meta, "w") as fh:
                fh.writelines(f"{g}\n" for g, (_, size, _) in enumerate(SAMPLE_FIELDS) for _ in range(size))
                fh.write(f"{len(SAMPLE_FIELDS)}\n")  # the numeric column
            for shown, extra in (("the true fields (-meta)", ("-meta", meta)), ("one (no -meta)", ())):
                scores = []
                for seed in SEEDS:
                    out = os.path.join(tmp, "p.txt")
                    subprocess.run([binary, "-task", task, "-train", plain["train"], "-test", plain["test"], "-out",
                                    out, "-dim", "1,1,32", "-method", "mcmc", "-init_stdev", "0.1", "-iter",
                                    str(ITERS), "-seed", str(seed), *extra], check=True, stdout=subprocess.DEVNULL)
                    scores.append(evaluate(task, truth, np.loadtxt(out))[metric])
                print(f"{'libFM':<6}{'fm 32':<16}{name:<16}{shown:<34}{shown_rmse(scores):>18}", flush=True)


def per_iteration(command, iters):
    """Wall and CPU seconds per iteration of ``command`` (a list with ITER in it): (T(iters) - T(1)) /
    (iters - 1). CPU time (user + system of the child) hardly moves when others share the cores."""
    def timed(n):
        before = os.times()
        start = time.perf_counter()
        subprocess.run([str(n) if a == "ITER" else a for a in command], check=True, stdout=subprocess.DEVNULL)
        after = os.times()
        cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
        return np.array([time.perf_counter() - start, cpu])
    return (timed(iters) - timed(1)) / (iters - 1)


def speed(binary):
    paths = files("ids")
    print(f"Seconds per iteration (test predicted every iteration), ml-100k u1 ids, FM, "
          f"(T({ITERS}) - T(1)) / {ITERS - 1} in fresh processes; the machine was shared")
    print("wall clock ms (CPU ms: user + system of the process, all threads)")
    print(f"{'method':<7}{'rank':>5}{'rafm 1 thread':>22}{'rafm 2 threads':>22}{'libFM':>22}")
    for method, dim in (("mcmc", 8), ("mcmc", 32), ("als", 32)):
        extra = ["--burn-in", "0"] if method == "mcmc" else ["--holdout", "0"]
        base = [sys.executable, "-m", "rafmcli", "train", "--task", "r", "--train", paths["train"], "--test",
                paths["test"], "--out", os.devnull, "--model", "fm", "--dim", str(dim), "--method", method,
                "--iter", "ITER", "--quiet", *extra]
        subprocess.run([a.replace("ITER", "2") for a in base], check=True)  # compile once
        one = per_iteration(base + ["--threads", "1"], ITERS)
        two = per_iteration(base + ["--threads", "2"], ITERS)
        lib = np.full(2, np.nan)
        if binary:
            lib = per_iteration([binary, "-task", "r", "-train", paths["train"], "-test", paths["test"], "-dim",
                                 f"1,1,{dim}", "-method", method, "-init_stdev", "0.1", "-iter", "ITER",
                                 *(["-regular", "0,10,10"] if method == "als" else [])], ITERS)
        shown = "".join(f"{t[0] * 1000:>10.1f} ({t[1] * 1000:6.1f} CPU)" for t in (one, two, lib))
        print(f"{method:<7}{dim:>5}{shown}", flush=True)


def click_task(binary):
    from rafmcli.metrics import evaluate

    print("ml-100k u1, rating >= 4 as the positive class: test logloss and AUC")
    print(f"{'tool':<6}{'model':<16}{'data':<11}{'method':<22}{'logloss':>9}{'AUC':>8}")
    for model, ranks, data, method in (("fm", "8", "ids", "mcmc"), ("fm", "32", "ids", "mcmc"),
                                       ("rafm", "8,32", "ids", "mcmc"), ("fm", "32", "ids", "mcmc 1 group"),
                                       ("rafm", "8,32", "ids", "mcmc 1 group"), ("fm", "32", "ids", "mcmc own prec"),
                                       ("rafm", "8,32", "ids", "mcmc own prec"), ("rafm", "8,32", "side", "mcmc"),
                                       ("fm", "8", "side+meta", "mcmc"),
                                       ("rafm", "8,32", "side+meta", "mcmc"),
                                       ("fm", "8", "ids", "adagrad"), ("rafm", "8,32", "ids", "adagrad"),
                                       ("fm", "8", "side+meta", "adagrad")):
        kind = data.split("+")[0] + "-click"
        args = ["--model", model, "--ranks", ranks, "--method", method.split()[0]]
        shown = method
        if "meta" in data:
            args += ["--meta", files(kind)["meta"]] if method == "mcmc" else []
        if method.startswith("mcmc"):
            args += ["--iter", ITERS] + (["--no-auto-groups"] if "group" in method else [])
            args += ["--group-precision"] if "own prec" in method else []
            shown = method.replace("mcmc", "mcmc (probit)")
        else:
            point = adagrad_point(kind, model, tuple(map(int, ranks.split(","))), task="c")
            args += ["--learn-rate", point["learn_rate"], "--regular", f"0,0,{point['reg_factors'][0]}"]
            shown = f"adagrad lr {point['learn_rate']:g}"
        predictions, _ = rafm(kind, *args, task="c")
        scores = evaluate("c", labels(kind), predictions)
        print(f"{'rafm':<6}{model + ' ' + ranks:<16}{data:<11}{shown:<22}{scores['logloss']:>9.4f}"
              f"{scores['auc']:>8.4f}", flush=True)
    if binary:
        for dim in (8, 32):
            predictions, _ = libfm(binary, "ids-click", "-dim", f"1,1,{dim}", "-method", "mcmc", "-init_stdev",
                                   0.1, "-iter", ITERS, task="c")
            scores = evaluate("c", labels("ids-click"), predictions)
            print(f"{'libFM':<6}{'fm ' + str(dim):<16}{'ids':<11}{'mcmc (probit)':<22}{scores['logloss']:>9.4f}"
                  f"{scores['auc']:>8.4f}", flush=True)


def samples():
    """Test RMSE of the saved model keeping K samples (stretch means, or thinned draws) against the
    whole chain's average."""
    from rafmcli.io.reader import read_dataset
    from rafmcli.model import files as model_files
    from rafmcli.model.layout import aligned_copy
    from rafmcli.predict import predict_dataset
    from rafmcli.solvers.coordinate import kept_iterations

    paths = files("ids")
    test = read_dataset(paths["test"])
    burn_in = ITERS // 10
    print(f"--keep-samples K: FM rank 32, MCMC {ITERS} iterations (burn-in {burn_in}), ml-100k u1 ids")
    print(f"{'K':>5}{'means: RMSE':>13}{'draws: RMSE':>13}{'model file':>12}")
    with tempfile.TemporaryDirectory() as tmp:
        everything = ITERS - burn_in
        chain, _ = rafm("ids", "--model", "fm", "--dim", 32, "--method", "mcmc", "--iter", ITERS,
                        "--keep-draws", "--keep-samples", everything, "--save-model", os.path.join(tmp, "all.rafm"))
        model = model_files.load(os.path.join(tmp, "all.rafm"))
        draws = list(model.samples)
        for K in (1, 2, 5, 10, 20, 50):
            ends = sorted(kept_iterations(ITERS, burn_in, K))
            starts = [burn_in] + ends[:-1]
            shown = []
            for kind in ("means", "draws"):
                if kind == "draws":
                    model.samples = [draws[end - burn_in - 1] for end in ends]
                else:
                    model.samples = [tuple(np.mean([d[k] for d in draws[a - burn_in:b - burn_in]], axis=0)
                                           for k in range(3)) for a, b in zip(starts, ends)]
                    model.samples = [(float(w0), w.astype(np.float32), aligned_copy(V.astype(np.float32)))
                                     for w0, w, V in model.samples]
                model.w0, model.w, model.V = model.samples[-1]
                path = os.path.join(tmp, f"{kind}{K}.rafm")
                model_files.save(model, path)
                shown.append(rmse("ids", predict_dataset(model_files.load(path), test).values))
            print(f"{K:>5}{shown[0]:>13.4f}{shown[1]:>13.4f}{os.path.getsize(path) / 1e6:>9.2f} MB", flush=True)
        print(f"chain: {rmse('ids', chain):.4f} (rafm train --test: the average of all {everything} samples)")


@click.command()
@click.option("--libfm", "binary", envvar="LIBFM", type=click.Path(exists=True, dir_okay=False),
              help="A libFM binary to run side by side ($LIBFM).")
@click.option("--section", "sections", multiple=True, type=click.Choice(SECTIONS), help="Default: all.")
def main(binary, sections):
    for name in sections or SECTIONS:
        if name == "samples":
            samples()
        else:
            {"accuracy": accuracy, "speed": speed, "click": click_task, "groups": groups}[name](binary)
        print(flush=True)


if __name__ == "__main__":
    main()
