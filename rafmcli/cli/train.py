"""`rafm train`: options in, a trained model, predictions and a log out."""

import click

from rafmcli.cli.libfm import TEST_METRICS, LibfmAwareCommand, test_report
from rafmcli.cli.options import (
    BINARY_OUTPUT,
    FLOATS,
    GROUP_LIST,
    INPUT,
    OUTPUT,
    RANKS,
    SEED,
    distinct_files,
    no_cache_option,
    ranged,
    read,
    warn_unseen,
)
from rafmcli.options import DEFAULTS as D
from rafmcli.options import L2_CHOICES, MAX_RANK, METRICS, STEP_METHODS, VARIANTS


def _nonempty(data):
    """``data``, unless it has no rows: a file to train or validate on must have some."""
    if data.n_rows == 0:
        from rafmcli.errors import InputError, printable

        raise InputError(f"{printable(data.path)}: no rows")
    return data


def _groups(groups, data, train_file, used, quiet):
    """The feature groups: the --meta file's (``groups``), else the fields of a
    libFFM training file; None without either."""
    from rafmcli.errors import printable
    from rafmcli.io.groups import FieldGroups

    fields = FieldGroups.of(data)
    if groups is None:
        return fields
    if fields is not None and used and not quiet:
        click.echo(f"rafm: the --meta file gives the feature groups; the fields of {printable(train_file)} "
                   f"are not used", err=True)
    return groups


def _shown(values):
    return ",".join(f"{v:g}" for v in values)


def _regularisation(regular, ranks, later):
    """(reg_bias, reg_linear, reg_factors) from --regular for ``ranks``; with ``later`` (als/mcmc,
    whose groups may come from --meta or the training file's libFFM fields) a per-group form waits
    for the data's groups."""
    from rafmcli.options import regularisation

    try:
        return regularisation(regular, len(ranks))
    except ValueError as exc:
        if not later:
            raise click.BadParameter(str(exc), param_hint="--regular") from None
    return None, None, None


def _chosen_ranks(data, model_kind, quiet):
    """Ranks from the training rows' frequency histogram (no --ranks or --dim), said on stderr."""
    from rafmcli import ranksets

    choice = ranksets.choose(data.counts, data.n_rows, model_kind)
    if not quiet:
        click.echo(f"rafm: ranks {_shown(choice.ranks)}: {choice.why}; --ranks to choose", err=True)
    return choice.ranks


def _warn_thin_levels(data, model_kind, ranks, levels_override):
    """Say which levels hold too few features to matter (Eq. 17 levels; a --levels file aside)."""
    from rafmcli import ranksets

    if model_kind == "fm" or len(ranks) < 2 or levels_override is not None:
        return
    for level, features, share in ranksets.thin_levels(data.counts, data.n_rows, ranks):
        click.echo(f"rafm: warning: level {level} (rank {ranks[level - 1]}) holds {features:,} features of its "
                   f"own, {share:.1%} of the non-zeros: it hardly changes the model; `rafm stats --ranks` "
                   f"shows the levels", err=True)


def _method_rates():
    from rafmcli.options import RATE_STEPS, method_default

    rates = ", ".join(f"{method_default(m, 'learn_rate'):g} for {m}" for m in (*STEP_METHODS, "sgda"))
    steps = "; ".join(f"{_shown(s)} times for {', '.join(m for m in RATE_STEPS if RATE_STEPS[m] == s)}"
                      for s in dict.fromkeys(RATE_STEPS.values()))
    return f"{rates}; with validation rows raced with the pairwise L2 at {steps}"


def _given(ctx, name):
    return ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE


def _continued_settings(ctx, init, path, method, learn_rate, regular, quiet):
    """--init-model continues with the learning rate and L2 its model was trained with (the
    defaults' race may have chosen them) unless --learn-rate or --regular is given; says so."""
    from rafmcli.errors import printable
    from rafmcli.model.continued import trained_settings

    saved_rate, saved_regular = trained_settings(init, method)
    taken = []
    if not _given(ctx, "learn_rate") and saved_rate is not None:
        learn_rate = saved_rate
        taken.append(f"--learn-rate {learn_rate:g}")
    if not _given(ctx, "regular") and saved_regular is not None:
        regular = saved_regular
        taken.append("--regular " + ",".join(f"{v:g}" for v in regular))
    if taken and not quiet:
        click.echo(f"rafm: continuing with {' and '.join(taken)} of {printable(path)} (give them to change)",
                   err=True)
    return learn_rate, regular


def check_method_options(ctx, method):
    """Refuse options the chosen method has no use for (exit 2)."""
    from rafmcli.options import METHOD_IGNORES

    for name in METHOD_IGNORES.get(method, ()):
        if _given(ctx, name):
            why = {"mcmc": "MCMC draws its regularisation from hyperpriors and averages every sample "
                           "after --burn-in",
                   "sgda": "SGDA learns its regularisation, from 0, on the validation rows and trains every "
                           "parameter on the model's loss",
                   "als": "ALS takes each coordinate's exact minimiser and keeps one model"}.get(
                method, "--burn-in, --keep-samples and --keep-means/--keep-draws are for --method mcmc")
            if name == "auto_groups":
                why = "feature groups shape the priors and L2 weights of sgda, als and mcmc only"
            if name == "shared_precision":
                why = "only mcmc draws prior precisions"
            raise click.UsageError(f"{_typed_flag(ctx, name)} does not apply to --method {method}: {why}")


def check_task_options(ctx, task, validation, holdout):
    """Refuse --task implicit's options with another task, and a hold-out beside --validation
    (exit 2): both were ignored without a word."""
    from rafmcli.options import IMPLICIT_ONLY

    if task != "implicit":
        for name in IMPLICIT_ONLY:
            if _given(ctx, name):
                raise click.UsageError(f"{_typed_flag(ctx, name)} applies to --task implicit only")
    if validation and holdout and _given(ctx, "holdout"):
        raise click.UsageError(f"--holdout {holdout:g} and --validation: the validation file takes the hold-out's "
                               f"place; give one of them")


def _typed_flag(ctx, name):
    """The spelling of option ``name`` the user typed: the off side of an on/off flag pair
    (--group-precision, --no-auto-groups) when its value is off."""
    param = next(p for p in ctx.command.params if p.name == name)
    if getattr(param, "is_bool_flag", False) and param.secondary_opts and not ctx.params.get(name):
        return param.secondary_opts[0]
    return param.opts[0]


def check_variant_options(ctx, model_kind, variant, dependent_rate, method=None):
    """Refuse options the chosen model or variant would ignore (exit 2)."""
    given = {name for name in ("variant", "dependent_weight") if _given(ctx, name)}
    if dependent_rate is not None:
        given.add("dependent_rate")
    if model_kind != "rafm" and given:
        name = sorted(given)[0].replace("_", "-")
        raise click.UsageError(f"--{name} applies to --model rafm only")
    if "dependent_rate" in given and variant != "paper":
        raise click.UsageError(f"--dependent-rate is rho_d of --variant paper (Algorithm 1); --variant "
                               f"{variant} trains every parameter with one optimizer at --learn-rate")
    if "dependent_weight" in given and variant == "paper" and method not in ("als", "mcmc"):
        raise click.UsageError("--dependent-weight is c_p of --variant authors or cascade; --variant paper "
                               "(Algorithm 1) trains dependent variables on the distillation loss alone")


@click.command(cls=LibfmAwareCommand)
@click.option("--task", type=click.Choice(["r", "c", "implicit"]), required=True,
              help="r: regression (square loss); c: binary classification (logistic loss, "
                   "label > 0 is positive); implicit: every row a positive (label > 0), negatives "
                   "sampled by feature group (needs --meta).")
@click.option("--train", "train_file", type=INPUT, required=True, help="Training file (libSVM/libFM text).")
@click.option("--validation", type=INPUT,
              help="Validation file: metrics after each epoch, early stopping, best epoch kept.")
@click.option("--holdout", type=ranged("holdout"), default=D.holdout, show_default=True,
              help="Without --validation, the fraction of training rows held out to validate on; "
                   "0 trains on all rows for --iter epochs.  [mcmc: 0]")
@click.option("--test", type=INPUT, help="File to predict after training (needs --out).")
@click.option("--out", type=OUTPUT, help="Prediction file for --test, one value a line; - for stdout.")
@click.option("--save-model", type=BINARY_OUTPUT, help="Write the trained model to this file.")
@click.option("--init-model", type=click.Path(exists=True, dir_okay=False),
              help="Continue training this saved model (same task, model and ranks): its features keep "
                   "levels and parameters, new features get Eq. 17 levels and fresh factors. A libFM text "
                   "model (libFM -save_model) continues as an FM.")
@click.option("--dump-model", type=OUTPUT,
              help="Also write the trained model as text: rafm dump's layout, libFM's -save_model layout "
                   "for an FM.")
@click.option("--save-state", is_flag=True,
              help="Also save the optimizer state (AdaGrad/Adam accumulators) in --save-model, so that "
                   "--init-model continues exactly; the file grows by one (adagrad) or two (adam) copies of the "
                   "factors, or by rowwise-adagrad's one sum a factor row.")
@click.option("--model", "model_kind", type=click.Choice(["fm", "rafm", "difacto"]), default=D.model,
              show_default=True, help="Model: FM, rank-aware FM, or DiFacto.")
@click.option("--dim", type=click.IntRange(1, MAX_RANK),
              help="Rank of an FM (same as --ranks D).  [default: from the data, as --ranks]")
@click.option("--ranks", type=RANKS,
              help="Ranks D_1<...<D_m of rafm and difacto.  [default: from the training rows' frequency "
                   "histogram, printed with the reason]")
@click.option("--levels", "levels_file", type=click.Path(dir_okay=False),
              help="File of 'feature level' lines overriding the Eq. 17 level k_i of those features.")
@click.option("--method", type=click.Choice([*STEP_METHODS, "sgda", "als", "mcmc"]), default=D.method,
              show_default=True,
              help="sgd, adagrad, rowwise-adagrad, adam: stochastic gradients (adagrad and adam update lazily, "
                   "only the rows a sample touches; rowwise-adagrad keeps one AdaGrad sum a factor row, the mean "
                   "of its squared gradients, not one a factor); sgda: SGD whose L2 weights are learnt on the "
                   "validation rows (libFM's); "
                   "als: coordinate descent, each parameter set to its exact minimiser; mcmc: Bayesian FM by "
                   "Gibbs sampling with hyperpriors (libFM's default), predictions averaged over the chain, no "
                   "learning rate or regularisation to tune.")
@click.option("--burn-in", type=ranged("burn_in"),
              help="mcmc: samples drawn before the average starts.  [default: --iter/10]")
@click.option("--keep-samples", type=ranged("keep_samples"), default=D.keep_samples, show_default=True,
              help="mcmc: samples the --save-model file keeps, one for each of K equal stretches of the chain "
                   "after the burn-in; the file grows by a model's size for each.")
@click.option("--keep-means/--keep-draws", default=D.keep_means, show_default=True,
              help="mcmc: keep each stretch's mean (as accurate as the whole chain with 10 of them) or its "
                   "last draw (thinning: far more are needed).")
@click.option("--iter", "iters", type=ranged("iters"), default=D.iters, show_default=True,
              help="Maximum number of epochs.")
@click.option("--learn-rate", type=ranged("learn_rate"),
              help="Learning rate rho_f (free variables, bias, linear weights).  "
                   f"[default: {_method_rates()}]")
@click.option("--dependent-rate", type=ranged("dependent_rate"),
              help="RaFM, paper variant: learning rate rho_d of dependent variables (Algorithm 1).  "
                   "[default: --learn-rate]")
@click.option("--variant", type=click.Choice(list(VARIANTS)), default=D.variant, show_default=True,
              help="RaFM training: paper (Algorithm 1, two learning rates), authors (one optimizer on the "
                   "loss plus distillation terms with the stop-gradients of the authors' code) or cascade "
                   "(the same terms, gradient through every level).")
@click.option("--dependent-weight", type=ranged("dependent_weight"), default=D.dependent_weight, show_default=True,
              help="RaFM, authors and cascade variants, als and mcmc: weight c_p of each distillation term "
                   "(mcmc: 2).")
@click.option("--regular", type=FLOATS,
              default=_shown((D.reg_bias, D.reg_linear) + D.reg_factors), show_default=True,
              help="L2 regularisation r0,r1,r2: bias, linear, pairwise; r2 may be one value per level "
                   "(r0,r1,r2_1,...,r2_m); with --meta, one value per group (r0,r1_1..r1_G,r2_1..r2_G) "
                   "or r2 per group and level. sgd, adagrad, rowwise-adagrad, adam: applied when a feature "
                   "occurs; als: prior precisions, added once (libFM's ALS).  [als: 0,10,10; sgd, adagrad, "
                   f"rowwise-adagrad, adam with validation rows: the pairwise L2 raced among "
                   f"{_shown(L2_CHOICES)} on them, with the learning rate]")
@click.option("--init-stdev", type=ranged("init_stdev"), default=D.init_stdev, show_default=True,
              help="Standard deviation of the normal initialisation of the factors.  [als, mcmc: 0.1]")
@click.option("--bias/--no-bias", default=D.bias, show_default=True, help="Use the bias w0.")
@click.option("--linear/--no-linear", default=D.linear, show_default=True, help="Use the linear weights w_i.")
@click.option("--seed", type=SEED, default=D.seed, show_default=True,
              help="Random seed (initialisation, row order, hold-out), any 64-bit integer (a negative s is s+2^64); "
                   "--threads 1 is bit-for-bit reproducible.")
@click.option("--threads", type=ranged("threads"), default=D.threads, show_default=True,
              help="Training threads, 0: every available core; fewer on small data, where they would not "
                   "pay. More than one: lock-free Hogwild SGD, not bit-for-bit reproducible.")
@click.option("--early-stop", type=ranged("early_stop"), default=D.early_stop, show_default=True,
              help="Stop after this many epochs without a better validation --metric; 0: never.")
@click.option("--metric", type=click.Choice(METRICS),
              help="Validation metric for early stopping and the best epoch: rmse or mae (r); logloss, auc "
                   "or accuracy (c).  [default: rmse for r, logloss for c]")
@click.option("--meta", type=click.Path(dir_okay=False),
              help="Feature groups (libFM's group file: line n holds the group of feature n; features beyond "
                   "the file form one more group): als and mcmc give each group its own priors and L2 "
                   "weights (--regular per group); implicit data resamples negatives by group. A libFFM "
                   "training file (field:index:value) gives its fields as the groups; --meta overrides them.")
@click.option("--auto-groups/--no-auto-groups", default=D.auto_groups, show_default=True,
              help="Without --meta or libFFM fields, sgda, als and mcmc take the one-hot fields found in the "
                   "training rows (features that never share a row) as the groups, said on stderr; numeric "
                   "columns, multi-hot sets and the rest form one more group. --no-auto-groups: one group "
                   "(libFM without -meta).")
@click.option("--shared-precision/--group-precision", default=D.shared_precision, show_default=True,
              help="mcmc: the groups share each prior precision (per level and factor coordinate) and keep "
                   "their own prior means; --group-precision gives each group its own precision as well "
                   "(libFM's priors), which needs many rows per parameter in every group.")
@click.option("--negatives", type=ranged("negatives"), default=D.negatives, show_default=True,
              help="Implicit: negatives per positive, all made by resampling one group.")
@click.option("--alpha1", type=ranged("alpha1"), default=D.alpha1, show_default=True,
              help="Implicit: the resampled group is drawn with probability proportional to c^alpha1, "
                   "c its number of distinct features.")
@click.option("--alpha2", type=ranged("alpha2"), default=D.alpha2, show_default=True,
              help="Implicit: a group's new value is drawn with probability proportional to its "
                   "training count^alpha2 (0: uniform).")
@click.option("--loss", type=click.Choice(["logistic", "softmax"]), default=D.loss, show_default=True,
              help="Implicit: softmax (the positive against its negatives, LSE(0, y_k - y_0, ...); with "
                   "--nce, sampled softmax: consistent across groups, see rafm-train(1)) or logistic "
                   "(each row against noise, Feat2Vec's form).")
@click.option("--nce/--no-nce", default=D.nce, show_default=True,
              help="Implicit: correct each score by -log(K Q2(value)) (Feat2Vec's noise-contrastive "
                   "form); --no-nce is plain negative sampling.")
@click.option("--reject-positives/--keep-positives", default=D.reject_positives, show_default=True,
              help="Implicit: draw a negative again when it is a training row (or the positive itself).")
@click.option("--regular-negatives/--no-regular-negatives", default=D.regular_negatives, show_default=True,
              help="Implicit: apply --regular's L2 to the features of every scored row, the negatives "
                   "included, or of the positive only (as often as the data has each feature; embeddings "
                   "keep more of shared features such as genres, see rafm-train(1)).")
@click.option("--negative-groups", type=GROUP_LIST,
              help="Implicit: resample only these groups (comma-separated).  [default: all]")
@click.option("--eval-group", type=ranged("eval_group"),
              help="Implicit: rank each validation row's value of this group among all its values "
                   "(HR@K, NDCG@K full and with 100 sampled); early stopping then watches NDCG@K, and at "
                   "least --eval-share of the positives resample this group.")
@click.option("--eval-share", type=ranged("eval_share"), default=D.eval_share, show_default=True,
              help="Implicit, with --eval-group: the least share of positives whose negatives resample "
                   "that group (the other groups' shares scaled down alike); 0: c^alpha1 alone.")
@click.option("--top-k", type=ranged("top_k"), default=D.top_k, show_default=True,
              help="Implicit: K of HR@K and NDCG@K.")
@click.option("--rlog", type=OUTPUT,
              help="Tab-separated log, one row per epoch: epoch, seconds, train_loss, validation metrics; "
                   "- for stdout.")
@click.option("--quiet", is_flag=True, help="No progress bar and no summary on stderr.")
@no_cache_option
def train(task, train_file, validation, holdout, test, out, save_model, init_model, dump_model, save_state,
          model_kind, dim, ranks, levels_file, method, burn_in, keep_samples, keep_means, iters, learn_rate,
          dependent_rate, variant, dependent_weight, regular, init_stdev, bias, linear, seed, threads, early_stop,
          metric, meta, auto_groups, shared_precision, negatives,
          alpha1, alpha2, loss, nce, reject_positives, regular_negatives, negative_groups, eval_group, eval_share,
          top_k, rlog, quiet, no_cache):
    """Train FM, RaFM or DiFacto on a libSVM/libFM file.

    Each feature gets its rank level by the log-nearest rule (paper Eq. 17)
    from its number of occurrences in the training file. Progress goes to
    stderr; predictions (--test, --out) and the model (--save-model) are
    written only when training succeeds.
    """
    from rafmcli.errors import printable
    from rafmcli.io.levels_file import read_levels_file
    from rafmcli.metrics import early_stop_metric
    from rafmcli.options import Options, method_default, regularisation
    from rafmcli.solvers.sgd import holdout_split

    if dim is not None and ranks is not None:
        raise click.UsageError("give --dim or --ranks, not both")
    init = None
    if init_model:
        from rafmcli.model import continued
        from rafmcli.model import files as model_files

        if task == "implicit":
            raise click.UsageError("--init-model continues r and c models; implicit ones start afresh")
        if method in ("als", "mcmc", "sgda"):
            raise click.UsageError(f"--init-model continues --method {', '.join(STEP_METHODS)}, not {method}")
        init = model_files.load(init_model, text_ok=True)
        given = click.get_current_context().get_parameter_source("model_kind").name != "DEFAULT"
        model_kind, ranks = continued.settle(init, init_model, task, model_kind if given else None,
                                             (dim,) if dim is not None else ranks)
        if init.state is not None and init.state.method != method and not quiet:
            click.echo(f"rafm: {printable(init_model)}: its optimizer state is for {init.state.method}; "
                       f"{method} starts afresh", err=True)
        dim = None
    ranks = (dim,) if dim is not None else ranks  # None: chosen from the training rows (ranksets.choose)
    if model_kind == "fm" and ranks is not None and len(ranks) > 1:
        raise click.UsageError("an FM has one rank: use --dim D (or --model rafm/difacto)")
    report_test = click.get_current_context().meta.get(TEST_METRICS, False)  # rafm libfm: -out is optional
    if test and not out and not report_test:
        raise click.UsageError("--test needs --out FILE (or --out - for stdout)")
    if out and not test:
        raise click.UsageError("--out needs --test FILE")
    distinct_files({"--train": train_file, "--validation": validation, "--test": test, "--init-model": init_model,
                    "--levels": levels_file, "--meta": meta},
                   {"--out": out, "--save-model": save_model, "--rlog": rlog, "--dump-model": dump_model},
                   in_place={("--save-model", "--init-model"), ("--dump-model", "--init-model")})
    ctx = click.get_current_context()
    check_method_options(ctx, method)
    check_variant_options(ctx, model_kind, variant, dependent_rate, method)
    check_task_options(ctx, task, validation, holdout)
    if metric and task == "implicit":
        raise click.UsageError("--metric applies to --task r and c; implicit training watches NDCG@K "
                               "(--eval-group) or the validation loss")
    try:
        early_stop_metric(task, metric)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--metric") from None
    coordinate = method in ("als", "mcmc")
    grouped = coordinate or method == "sgda"  # methods with per-group priors or L2 weights
    if (grouped or method == "sgda") and task == "implicit":
        raise click.UsageError(f"--task implicit trains with {', '.join(STEP_METHODS)}, not --method {method}")
    if meta and not grouped and task != "implicit":
        raise click.UsageError("--meta applies to --method sgda, als and mcmc and to --task implicit")
    if method == "mcmc" and burn_in is not None and burn_in >= iters:
        raise click.BadParameter(f"must be below --iter ({iters})", param_hint="--burn-in")
    init_stdev = init_stdev if _given(ctx, "init_stdev") else method_default(method, "init_stdev")
    holdout = holdout if _given(ctx, "holdout") else method_default(method, "holdout")
    learn_rate = learn_rate if _given(ctx, "learn_rate") else method_default(method, "learn_rate")
    dependent_weight = dependent_weight if _given(ctx, "dependent_weight") else method_default(method,
                                                                                              "dependent_weight")
    if not _given(ctx, "regular"):
        regular = ((method_default(method, "reg_bias"), method_default(method, "reg_linear"))
                   + tuple(method_default(method, "reg_factors")))
    if init is not None:
        learn_rate, regular = _continued_settings(ctx, init, init_model, method, learn_rate, regular, quiet)
    if ranks is not None:  # groups (--meta, libFFM fields) may come with the data: als/mcmc wait for it
        reg_bias, reg_linear, reg_factors = _regularisation(regular, ranks, coordinate)
    implicit = task == "implicit"
    groups = None
    if meta:
        from rafmcli.io.groups import read_groups

        groups = read_groups(meta)
    levels_override = read_levels_file(levels_file, len(ranks)) if levels_file and ranks is not None else None
    data = _nonempty(read(train_file, no_cache, quiet))
    groups = _groups(groups, data, train_file, grouped or implicit, quiet)
    if implicit and groups is None:
        raise click.UsageError("--task implicit needs feature groups: --meta FILE or a libFFM training file "
                               "(field:index:value)")
    valid = _nonempty(read(validation, no_cache, quiet)) if validation else None
    test_data = read(test, no_cache, quiet) if test else None
    if hasattr(groups, "check"):  # the training file's libFFM fields are the groups
        for name, part in ((validation, valid), (test, test_data)):
            if part is not None:
                groups.check(name, part)
    if implicit:
        from rafmcli.io.reader import require_positive_labels

        for name, part in ((train_file, data), (validation, valid)):
            if part is not None:
                require_positive_labels(name, part)
    if valid is None and holdout > 0:
        data, valid = holdout_split(data, holdout, seed)
        _nonempty(data)
        if valid is not None and not quiet:
            click.echo(f"rafm: validating on {valid.n_rows:,} held-out training rows ({holdout:g}); "
                       f"--validation FILE or --holdout 0 to change", err=True)
    if ranks is None:
        ranks = _chosen_ranks(data, model_kind, quiet)
        reg_bias, reg_linear, reg_factors = _regularisation(regular, ranks, coordinate)
        levels_override = read_levels_file(levels_file, len(ranks)) if levels_file else None
    if not quiet:
        _warn_thin_levels(data, model_kind, ranks, levels_override)
    if levels_override is not None and not quiet:
        absent = levels_override.absent(data.feature_ids)
        if absent:
            click.echo(f"rafm: {printable(levels_file)}: {absent:,} of its {levels_override.ids.shape[0]:,} "
                       f"features do not occur in training; their levels are not used", err=True)
    if method == "sgda" and valid is None:
        raise click.UsageError("--method sgda learns its regularisation on validation rows: give --validation "
                               "FILE or --holdout > 0")
    assignment = None
    if groups is not None and grouped:
        assignment = groups.assign(data.feature_ids)
        if assignment.beyond and not quiet:
            click.echo(f"rafm: {printable(meta)}: {assignment.beyond:,} features beyond its "
                       f"{groups.of_id.shape[0]:,} lines form group {assignment.n_groups - 1}", err=True)
        try:
            reg_bias, reg_linear, reg_factors = regularisation(regular, len(ranks), assignment.n_groups)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--regular") from None
    elif coordinate:
        reg_bias, reg_linear, reg_factors = _regularisation(regular, ranks, False)
    opts = Options(task=task, model=model_kind, ranks=tuple(ranks), method=method, iters=iters,
                   learn_rate=learn_rate, dependent_rate=dependent_rate, variant=variant,
                   dependent_weight=dependent_weight, reg_bias=reg_bias, reg_linear=reg_linear,
                   reg_factors=reg_factors, init_stdev=init_stdev, bias=bias, linear=linear,
                   seed=seed, threads=threads, early_stop=early_stop, holdout=holdout, metric=metric, burn_in=burn_in,
                   keep_samples=keep_samples, keep_means=keep_means, auto_groups=auto_groups,
                   shared_precision=shared_precision,
                   negatives=negatives, alpha1=alpha1, alpha2=alpha2, loss=loss, nce=nce,
                   reject_positives=reject_positives, regular_negatives=regular_negatives,
                   negative_groups=negative_groups,
                   eval_group=eval_group, eval_share=eval_share, top_k=top_k)
    import functools

    from rafmcli.errors import DivergedError
    from rafmcli.io.output import Outputs, format_predictions
    from rafmcli.model import files as model_files
    from rafmcli.predict import kernel_rows, predict_dataset, refuse_nan
    from rafmcli.solvers.sgd import race_choices
    from rafmcli.solvers.sgd import train as run_training

    with Outputs(commit_on=DivergedError) as outputs:  # a diverged run keeps its log: it shows how
        log = outputs.open(rlog) if rlog else None
        echo = lambda m: click.echo(m, err=True)  # noqa: E731
        chain_predictions = None
        if coordinate:
            from rafmcli.solvers.coordinate import train as run_coordinate

            result = run_coordinate(data, opts, validation=valid, test=test_data, groups=assignment,
                                    levels_override=levels_override, rlog=log, quiet=quiet, echo=echo,
                                    use_cache=not no_cache)
            model, chain_predictions = result.model, result.test_predictions
        elif implicit:
            from rafmcli.solvers.implicit import train as run_implicit

            model, _ = run_implicit(data, groups, opts, validation=valid, levels_override=levels_override,
                                    rlog=log, quiet=quiet, echo=echo)
        else:
            model, _ = run_training(data, opts, validation=valid, levels_override=levels_override,
                                    rlog=log, quiet=quiet, echo=echo, groups=assignment, init=init,
                                    race_plan=None if init is not None or valid is None  # races validate
                                    else race_choices(data, opts, l2=not _given(ctx, "regular"),
                                                      rate=not _given(ctx, "learn_rate")))
        if save_model:
            outputs.write(save_model, functools.partial(model_files.write, model, state=save_state), binary=True)
        if dump_model:
            from rafmcli.model import dump

            dump.check_dense(model, dump_model)
            outputs.write(dump_model, functools.partial(dump.write_text, model))
        if test_data is not None:
            if chain_predictions is not None:  # mcmc: the average over the whole chain
                predictions, (unseen, distinct) = chain_predictions, kernel_rows(model, test_data)[3:]
                refuse_nan(test, predictions)
            else:
                predictions, unseen, distinct = predict_dataset(model, test_data)
            if not quiet:
                warn_unseen(test, unseen, distinct)
            if out:
                outputs.write(out, functools.partial(format_predictions, predictions=predictions), binary=True)
            if report_test:
                echo(test_report(task, test, test_data.labels, predictions))
