"""`rafm libfm`: the command lines of libFM's manual and README on the shipped samples, libFM's
meaning of each option, libFM's text models both ways, and `rafm train` answering libFM spellings.

The manual's examples use -iter 1000 on MovieLens; here they run on data_samples/ with -iter 5.
"""

import numpy as np
import pytest
from click.testing import CliRunner

from rafmcli.cli import main
from rafmcli.libfm import LibfmError, translate
from rafmcli.model import files as model_files


def run(args):
    return CliRunner().invoke(main, args)


@pytest.fixture
def files(sample, tmp_path):
    return {"rtrain": sample("regression.train"), "rtest": sample("regression.test"),
            "rval": sample("regression.validation"), "ctrain": sample("classification.train"),
            "ctest": sample("classification.test"), "tmp": tmp_path}


# libFM manual, section 3 (ml1m-train.libfm -> regression.train, ...); -iter 1000 -> -iter 5
MANUAL = [
    ("-task r -train {rtrain} -test {rtest} -dim '1,1,8' -iter 5 -out {tmp}/p.txt", None),
    ("-task c -train {ctrain} -test {ctest} -dim '1,1,8' -iter 5 -out {tmp}/p.txt", None),
    ("-task r -train {rtrain} -test {rtest} -dim '1,1,8' -iter 5 -method sgd -learn_rate 0.01 "
     "-regular '0,0,0.01' -init_stdev 0.1 -out {tmp}/p.txt", None),
    ("-task r -train {rtrain} -test {rtest} -dim '1,1,8' -iter 5 -method als -regular '0,0,10' -init_stdev 0.1 "
     "-out {tmp}/p.txt", None),
    ("-task r -train {rtrain} -test {rtest} -dim '1,1,8' -iter 5 -method mcmc -init_stdev 0.1 -out {tmp}/p.txt", None),
    ("-task c -train {ctrain} -test {ctest} -dim '1,1,8' -iter 5 -method mcmc -out {tmp}/p.txt -save_model {tmp}/m",
     "an MCMC model all of them"),
    ("-task r -train {rtrain} -test {rtest} -validation {rval} -dim '1,1,8' -iter 5 -method sgda "
     "-learn_rate 0.01 -init_stdev 0.1 -out {tmp}/p.txt", None),
    ("-task r -train {rtrain} -test {rtest} -dim '1,1,8' -iter 5 -method sgda", "learns its regularisation on"),
    ("-task r -train {rtrain} -test {rtest} -dim '1,1,8' -iter 5 -method sgd -learn_rate 0.01 "
     "-rlog {tmp}/log.tsv -out {tmp}/p.txt -seed 3 -verbosity 1 -cache_size 100000", None),
    ("-task r -train {rtrain} -test {rtest} -relation {tmp}/rel", "-relation"),
]


@pytest.mark.parametrize("line,refusal", MANUAL)
def test_manual_command_lines(files, line, refusal):
    import shlex

    result = run(["libfm", *shlex.split(line.format(**files))])
    if refusal:
        assert result.exit_code == 2 and refusal in result.output
        assert list(files["tmp"].iterdir()) == []
        return
    assert result.exit_code == 0, result.output
    predictions = np.loadtxt(files["tmp"] / "p.txt")
    assert predictions.shape == (600,) and np.all(np.isfinite(predictions))
    if "-task c" in line:
        assert predictions.min() >= 0 and predictions.max() <= 1
    if "-method" not in line:  # libFM's default
        assert "mcmc" in result.stderr


def test_libfm_meaning_of_each_option():
    args = translate(["-task", "c", "-train", "t", "-dim", "0;1;4", "-regular", "0.5", "-learn_rate", "0.2",
                      "-method", "sgd", "--iter", "7", "-save_model", "m.txt", "-load_model", "old.txt"]).train_args
    pairs = dict(zip(args[::2], args[1::2]))
    assert {"--no-bias", "--linear"} <= set(args)
    assert (pairs["--dim"], pairs["--regular"], pairs["--learn-rate"], pairs["--iter"]) == ("4", "0.5,0.5,0.5",
                                                                                           "0.2", "7")
    assert (pairs["--method"], pairs["--holdout"], pairs["--early-stop"], pairs["--init-stdev"]) == (
        "sgd", "0", "0", "0.1")
    assert (pairs["--dump-model"], pairs["--init-model"]) == ("m.txt", "old.txt")
    defaults = translate(["-task", "r", "-train", "t", "-method", "sgd"]).train_args
    pairs = dict(zip(defaults[::2], defaults[1::2]))
    assert (pairs["--dim"], pairs["--regular"], pairs["--learn-rate"], pairs["--iter"]) == ("8", "0,0,0", "0.1", "100")
    for bad, words in ((["-dim", "1,1"], "k0,k1,k"), (["-regular", "1,2"], "one value or r0,r1,r2"),
                       (["-learn_rate", "0.1,0.2,0.3"], "one learning rate"), (["-task", "x"], "tasks are r"),
                       (["-frobnicate", "1"], "not a libFM option"), (["-iter"], "needs a value")):
        with pytest.raises(LibfmError, match=words):
            translate(["-task", "r", "-train", "t", "-method", "sgd", *bad])


def test_no_bias_no_linear_model(files):
    saved = files["tmp"] / "m.txt"
    result = run(["libfm", "-task", "r", "-train", files["rtrain"], "-dim", "0,0,4", "-iter", "3", "-method", "sgd",
                  "-learn_rate", "0.01", "-save_model", str(saved)])
    assert result.exit_code == 0, result.output
    assert saved.read_text().startswith("#pairwise interactions Vj,f\n")  # as libFM's -dim 0,0,4 writes and reads
    model = model_files.load(str(saved), text_ok=True)
    assert model.w0 == 0 and not np.any(model.w) and model.ranks == (4,)


@pytest.mark.parametrize("method", ["sgd", "als"])
def test_rank_0_is_refused_with_the_linear_model_to_run(files, method):
    """libFM's -dim 1,1,0 (no factors): rafm has no rank 0; the line the message gives trains factors that stay 0."""
    with pytest.raises(LibfmError, match=r"-dim 1,1,0: rafm has no rank-0 model; .* -dim '1,1,1' -init_stdev 0"):
        translate(["-task", "r", "-train", "t", "-dim", "1,1,0", "-method", method])
    saved = files["tmp"] / "m.txt"
    result = run(["libfm", "-task", "r", "-train", files["rtrain"], "-dim", "1,1,1", "-init_stdev", "0", "-iter", "5",
                  "-method", method, "-learn_rate", "0.01", "-save_model", str(saved)])
    assert result.exit_code == 0, result.output
    model = model_files.load(str(saved), text_ok=True)
    assert not np.any(model.V) and np.any(model.w)


def test_save_model_is_libfm_text_and_load_model_continues(files):
    tmp = files["tmp"]
    common = ["-task", "r", "-test", files["rtest"], "-dim", "1,1,4", "-method", "sgd", "-learn_rate", "0.01"]
    assert run(["libfm", *common, "-train", files["rtrain"], "-iter", "4", "-save_model", str(tmp / "a.txt"),
                "-out", str(tmp / "a.pred")]).exit_code == 0
    text = (tmp / "a.txt").read_text().split("\n")
    assert text[0] == "#global bias W0" and text[2] == "#unary interactions Wj"
    assert "#pairwise interactions Vj,f" in text
    # what libFM itself writes: no rafm line at the end, read as an FM of the same predictions
    libfm_only = tmp / "libfm.txt"
    libfm_only.write_text("\n".join(line for line in text if not line.startswith("#rafm")))
    # libFM text keeps no target range: training on the same file keeps the same clipping range
    again = run(["libfm", *common, "-train", files["rtrain"], "-iter", "1", "-learn_rate", "1e-12",
                 "-load_model", str(libfm_only), "-out", str(tmp / "b.pred")])
    assert again.exit_code == 0, again.output
    np.testing.assert_allclose(np.loadtxt(tmp / "b.pred"), np.loadtxt(tmp / "a.pred"), atol=1e-4)
    wrong_task = run(["libfm", "-task", "c", "-method", "sgd", "-train", files["ctrain"], "-load_model",
                      str(tmp / "a.txt")])
    assert wrong_task.exit_code == 2 and "cannot continue as classification" in wrong_task.output


def test_meta_is_accepted_with_a_note(files, tmp_path):
    meta = tmp_path / "groups.meta"
    meta.write_text("0\n")
    result = run(["libfm", "-task", "r", "-train", files["rtrain"], "-meta", str(meta), "-method", "sgd",
                  "-learn_rate", "0.01", "-iter", "2"])
    assert result.exit_code == 0 and "-meta" in result.stderr


@pytest.mark.parametrize("method", ["sgd", "sgda", "als", "mcmc"])
def test_groups_as_libfm_has_them(method):
    """Without -meta libFM has one group (no inferred fields); with it, mcmc draws a prior precision per group."""
    extra = ["-validation", "v"] if method == "sgda" else []
    plain = translate(["-task", "r", "-train", "t", "-method", method, *extra]).train_args
    assert ("--no-auto-groups" in plain) == (method != "sgd")
    meta = translate(["-task", "r", "-train", "t", "-method", method, "-meta", "g.txt", *extra]).train_args
    assert "--no-auto-groups" not in meta and ("--group-precision" in meta) == (method == "mcmc")


def test_one_group_without_meta(files):
    result = run(["libfm", "-task", "r", "-train", files["rtrain"], "-iter", "2"])
    assert result.exit_code == 0 and "inferred" not in result.stderr
    meta = files["tmp"] / "groups.meta"
    meta.write_text("0\n1\n")
    assert run(["libfm", "-task", "r", "-train", files["rtrain"], "-iter", "2", "-meta", str(meta)]).exit_code == 0


@pytest.mark.parametrize("method,setting", [("sgd", ["-learn_rate", "0.02", "-regular", "0"]),
                                            ("als", ["-regular", "10"])])
def test_validation_is_ignored_but_by_sgda(files, method, setting):
    """libFM: 'Validation data is only used for SGDA': -iter 30 gives iteration 30, not the best on -validation
    (iteration 29 for sgd, 13 for als here)."""
    tmp = files["tmp"]
    common = ["-task", "r", "-train", files["rtrain"], "-test", files["rtest"], "-method", method, "-iter", "30",
              "-dim", "1,1,16", "-init_stdev", "0.3", "-seed", "1", *setting]
    result = run(["libfm", *common, "-validation", files["rval"], "-out", str(tmp / "v.pred")])
    assert result.exit_code == 0, result.output
    assert run(["libfm", *common, "-out", str(tmp / "p.pred")]).exit_code == 0
    np.testing.assert_array_equal(np.loadtxt(tmp / "v.pred"), np.loadtxt(tmp / "p.pred"))
    assert "-validation: libFM uses it for -method sgda only" in result.stderr
    sgda = translate(["-task", "r", "-train", "t", "-method", "sgda", "-validation", "v"]).train_args
    assert sgda[sgda.index("--validation") + 1] == "v"


@pytest.mark.parametrize("method", ["sgd", "als", "mcmc"])
def test_test_without_out_reports_its_metric(files, method):
    """libFM's usual line, -test and no -out: the test metric on stderr, no file; with -out, the same metric."""
    tmp = files["tmp"]
    common = ["libfm", "-task", "r", "-method", method, "-train", files["rtrain"], "-test", files["rtest"],
              "-iter", "3", "-seed", "2", *(["-learn_rate", "0.01"] if method == "sgd" else [])]
    alone = run(common)
    assert alone.exit_code == 0, alone.output
    assert list(tmp.iterdir()) == []
    line = next(line for line in alone.stderr.splitlines() if line.startswith("rafm: test "))
    rmse = float(line.split(" rmse ")[1].split()[0])
    labels = np.loadtxt(files["rtest"], usecols=0)
    with_out = run([*common, "-out", str(tmp / "p.pred")])
    assert line in with_out.stderr
    assert rmse == pytest.approx(np.sqrt(np.mean((np.loadtxt(tmp / "p.pred") - labels) ** 2)), rel=1e-5)
    refused = run(["train", "--task", "r", "--train", files["rtrain"], "--test", files["rtest"], "--iter", "1"])
    assert refused.exit_code == 2 and "--test needs --out" in refused.output  # rafm train itself: as before


@pytest.mark.parametrize("task,method", [("r", "sgd"), ("c", "als")])
def test_iter_0_predicts_with_the_loaded_model(files, task, method):
    """libFM's way to apply a saved model: -iter 0 -load_model M -test G -out P, no training; the ALS
    classifier's text keeps its probit link, libFM's own text (no rafm line) clips to -train's targets."""
    tmp = files["tmp"]
    data = ["-task", task, "-method", method, "-dim", "1,1,4", "-train", files[task + "train"],
            "-test", files[task + "test"]]
    trained = run(["libfm", *data, "-iter", "4", "-learn_rate", "0.01", "-save_model", str(tmp / "m.txt"),
                   "-out", str(tmp / "a.pred")])
    assert trained.exit_code == 0, trained.output
    text = (tmp / "m.txt").read_text()
    assert ("link=probit" in text) == (method == "als")
    (tmp / "libfm.txt").write_text("".join(line for line in text.splitlines(True) if not line.startswith("#rafm")))
    for model in ("m.txt", "libfm.txt") if task == "r" else ("m.txt",):
        result = run(["libfm", *data, "-iter", "0", "-load_model", str(tmp / model), "-out", str(tmp / "b.pred"),
                      "-save_model", str(tmp / "again.txt")])
        assert result.exit_code == 0, result.output
        assert "-iter 0: no training" in result.stderr and "rafm: test " in result.stderr
        np.testing.assert_allclose(np.loadtxt(tmp / "b.pred"), np.loadtxt(tmp / "a.pred"), rtol=1e-6, atol=1e-6)
        assert (tmp / "again.txt").read_text().split("#rafm")[0] == text.split("#rafm")[0]
    refusals = ((["-dim", "1,1,8"], "its ranks are 4, not 8"), ([], "give one"))  # -method: no say (no training)
    for bad, words in refusals:
        (tmp / "c.pred").unlink(missing_ok=True)
        load = [] if not bad else ["-load_model", str(tmp / "m.txt")]
        result = run(["libfm", *data, "-iter", "0", *load, *bad, "-out", str(tmp / "c.pred")])
        assert result.exit_code == 2 and words in result.output and not (tmp / "c.pred").exists()


def test_a_repeated_index_sums_where_libfm_keeps_both(tmp_path):
    """README: rafm reads '1:1 1:0.5' as '1:1.5'; libFM keeps both entries, adding <v_1, v_1>*1*0.5: with
    w_1 = 0.5, v_1 = (1, 2), libFM 1.4.4 -iter 0 predicts 3.25 and 0.75, rafm 0.75 twice."""
    model, rows, train = tmp_path / "m.txt", tmp_path / "rows.libfm", tmp_path / "train.libfm"
    model.write_text("#global bias W0\n0\n#unary interactions Wj\n0\n0.5\n#pairwise interactions Vj,f\n0 0\n1 2\n")
    rows.write_text("0 1:1 1:0.5\n0 1:1.5\n")
    train.write_text("-100 0:1\n100 0:1\n")
    result = run(["libfm", "-task", "r", "-method", "sgd", "-train", str(train), "-test", str(rows), "-dim", "1,1,2",
                  "-iter", "0", "-load_model", str(model), "-out", str(tmp_path / "p.pred")])
    assert result.exit_code == 0, result.output
    assert "1 rows repeat a feature index" in result.stderr
    np.testing.assert_allclose(np.loadtxt(tmp_path / "p.pred"), [0.75, 0.75])


@pytest.mark.parametrize("line,token,what", [(2, "inf", "value is not finite"), (2, "nan", "value is not finite"),
                                               (4, "-Infinity", "value is not finite"),
                                               (7, "1e300", "value beyond float32"),
                                               (5, "3.5e38", "value beyond float32"),
                                               (7, "x", "not a number")])
def test_a_text_model_value_that_is_not_finite_names_its_line(tmp_path, line, token, what):
    """-load_model and --init-model refuse a libFM text model holding inf, nan, a number no float32
    holds or no number, with FILE:LINE: what (token), exit 2 (an inf bias predicted the clip
    maximum for every row, a nan one blamed the test data, 1e300 leaked numpy's warning)."""
    lines = ["#global bias W0", "0", "#unary interactions Wj", "0", "0.5", "#pairwise interactions Vj,f", "0 0", "1 2"]
    first, *rest = lines[line - 1].split()
    lines[line - 1] = " ".join([token, *rest])
    model, train = tmp_path / "m.txt", tmp_path / "train.libfm"
    model.write_text("\n".join(lines) + "\n")
    train.write_text("-100 0:1\n100 1:1\n")
    for args in (["libfm", "-task", "r", "-method", "sgd", "-train", str(train), "-test", str(train), "-dim", "1,1,2",
                  "-iter", "0", "-load_model", str(model), "-out", str(tmp_path / "p.pred")],
                 ["train", "--task", "r", "--train", str(train), "--init-model", str(model), "--iter", "1"]):
        result = run(args)
        assert result.exit_code == 2 and result.output.splitlines()[-1] == f"Error: {model}:{line}: {what} ({token})"
        assert "Warning" not in result.output and not (tmp_path / "p.pred").exists()


def test_a_text_model_or_group_file_named_with_a_newline_is_named_escaped(tmp_path, sample):
    """The text model's and the group file's error lines show a newline in the name as \\n (one
    line), as the data's do."""
    model, meta = tmp_path / "m\nrafm: fake.txt", tmp_path / "g\nrafm: fake.meta"
    model.write_text("#global bias W0\ninf\n#pairwise interactions Vj,f\n0 0\n")
    meta.write_text("0\nx\n")
    train = tmp_path / "train.libfm"
    train.write_text("-100 0:1\n100 1:1\n")
    for args, line in ((["train", "--task", "r", "--train", str(train), "--init-model", str(model)],
                        f"Error: {tmp_path}/m\\nrafm: fake.txt:2: value is not finite (inf)"),
                       (["train", "--task", "implicit", "--train", sample("implicit.train"), "--meta", str(meta)],
                        f"Error: {tmp_path}/g\\nrafm: fake.meta:2: not a non-negative integer (x)")):
        result = run(args)
        assert result.exit_code == 2 and result.output.strip() == line, result.output


@pytest.mark.parametrize("text,line", [
    ("#global bias W0\n0\n#unary interactions Wj\n0\n0.5\n#pairwise interactions Vj,f\n0 0\n1\n",
     "8: expected 2 factor values, found 1 (1)"),
    ("#global bias W0\n0\n#unary interactions Wj\n0\n0.5\n#pairwise interactions Vj,f\n0 0\n1 2\n\n",
     "9: expected 2 factor values, found 0 ()"),
    ("#global bias W0\n0 1\n#pairwise interactions Vj,f\n0 0\n1 2\n", "2: expected 1 bias value, found 2 (0 1)"),
    ("#global bias W0\n0\n1\n#pairwise interactions Vj,f\n0 0\n1 2\n", "3: a second bias line (1)"),
    ("#global bias W0\n0\n#unary interactions Wj\n0 1\n0.5\n#pairwise interactions Vj,f\n0 0\n1 2\n",
     "4: expected 1 weight value, found 2 (0 1)"),
    ("#global bias W0\n0\n# a comment\n#pairwise interactions Vj,f\n0 0\n1 2\n",
     "3: not a section of a libFM or rafm text model (# a comment)"),
    ("#global bias W0\n0\n#unary interactions Wj\n0\n#pairwise interactions Vj,f\n0 0\n1 2\n",
     " damaged libFM model (1 unary weights for 2 rows of factors)"),
])
def test_a_text_model_of_the_wrong_shape_names_its_line(tmp_path, text, line):
    """A ragged factor row, a trailing blank line, two bias values or lines, two weights on a line
    and an unknown '#' line are FILE:LINE (they were one message without a line, or a comment
    silently began a section that dropped the rows after it)."""
    model, train = tmp_path / "m.txt", tmp_path / "train.libfm"
    model.write_text(text)
    train.write_text("-100 0:1\n100 1:1\n")
    result = run(["train", "--task", "r", "--train", str(train), "--init-model", str(model), "--iter", "1"])
    assert result.exit_code == 2 and result.output.splitlines()[-1] == f"Error: {model}:{line}", result.output


def test_a_text_model_reads_the_same_by_numpy_and_line_by_line(tmp_path):
    """model.dump._section parses a section with numpy at once; what numpy stops at but float()
    reads (1_0), as before, goes line by line, and gives the same numbers."""
    from rafmcli.model.dump import read_text

    text = "#global bias W0\n{b}\n#unary interactions Wj\n0.25\n{w}\n#pairwise interactions Vj,f\n1e-3 2\n-3 {v}\n"
    fast, slow = tmp_path / "fast.txt", tmp_path / "slow.txt"
    fast.write_text(text.format(b="10", w="10", v="10"))
    slow.write_text(text.format(b="1_0", w="1_0", v="1_0"))
    a, b = read_text(str(fast)), read_text(str(slow))
    assert a.w0 == b.w0 == 10.0
    np.testing.assert_array_equal(a.w, b.w)
    np.testing.assert_array_equal(a.V, b.V)
    np.testing.assert_array_equal(a.V[:4], np.array([1e-3, 2, -3, 10], dtype=np.float32))


def test_a_rafm_line_with_a_target_range_that_is_not_finite_is_refused(tmp_path):
    """A '#rafm' line's target_min and target_max must be finite (a NaN range was taken, and the
    model trained from it saved a file rafm could not load); without them the range is the data's."""
    model, train = tmp_path / "m.txt", tmp_path / "train.libfm"
    train.write_text("-100 0:1\n100 1:1\n")
    base = "#global bias W0\n0\n#unary interactions Wj\n0\n0.5\n#pairwise interactions Vj,f\n0 0\n1 2\n"
    for rafm_line, ok in (("", True), ("#rafm task=r target_min=-1 target_max=1\n", True),
                          ("#rafm task=r target_min=nan target_max=nan\n", False),
                          ("#rafm task=r target_min=-inf target_max=1\n", False)):
        model.write_text(base + rafm_line)
        result = run(["train", "--task", "r", "--train", str(train), "--dim", "2", "--init-model", str(model),
                      "--iter", "1", "--save-model", str(tmp_path / "o.rafm")])
        assert (result.exit_code == 0) == ok, result.output
        if not ok:
            assert result.output.splitlines()[-1].startswith(f"Error: {model}: damaged rafm line: target_min and")


def test_rafm_train_answers_a_libfm_spelling(files):
    result = run(["train", "-task", "r", "-train", files["rtrain"], "-dim", "1,1,8"])
    assert result.exit_code == 2
    line = next(line for line in result.output.splitlines() if "libFM's spelling" in line)
    assert line.startswith("Error: -task is libFM's spelling: run `rafm libfm -task r -train")
    assert "`rafm train --task r --model fm" in line and "--dim 8" in line


def test_iter_0_ignores_the_method_and_saves_over_its_model(tmp_path, sample):
    """-iter 0 trains nothing, so libFM's default -method mcmc (whose text models rafm refuses) has
    no say; -save_model over -load_model is allowed, as libFM allows it."""
    from click.testing import CliRunner

    from rafmcli.cli import main

    model = tmp_path / "lf.txt"
    common = ["libfm", "-task", "r", "-train", sample("regression.train"), "-test", sample("regression.test"),
              "-dim", "1,1,4"]
    first = CliRunner().invoke(main, common + ["-method", "sgd", "-iter", "2", "-learn_rate", "0.01",
                                               "-save_model", str(model), "-out", str(tmp_path / "a")])
    assert first.exit_code == 0, first.output
    again = CliRunner().invoke(main, common + ["-iter", "0", "-load_model", str(model), "-save_model", str(model),
                                               "-out", str(tmp_path / "b")])
    assert again.exit_code == 0, again.output
    assert (tmp_path / "a").read_text() == (tmp_path / "b").read_text()
