"""tw.flags / tw.app: TF1's (absl's) command-line rules, tw.app.run's exit and argv, errors."""

import subprocess
import sys
import textwrap

import pytest

import tensorweave as tw
from tensorweave import flags as F


@pytest.fixture
def fv():
    fv = F.FlagValues()
    F.DEFINE_string("name", "x", "a string", flag_values=fv)
    F.DEFINE_integer("n", 3, "an int", lower_bound=0, flag_values=fv)
    F.DEFINE_float("lr", 0.1, "a float", flag_values=fv)
    F.DEFINE_boolean("fast", False, "a bool", flag_values=fv)
    F.DEFINE_bool("verbose", True, "another bool", flag_values=fv)
    F.DEFINE_list("layers", "64,32", "a list", flag_values=fv)
    F.DEFINE_enum("mode", "train", ["train", "eval"], "an enum", flag_values=fv)
    F.DEFINE_multi_string("tag", ["a"], "repeatable", flag_values=fv)
    return fv


def test_defaults_and_types(fv):
    fv.mark_as_parsed()
    assert fv.is_parsed()
    assert (fv.name, fv.n, fv.lr, fv.fast, fv.verbose) == ("x", 3, 0.1, False, True)
    assert fv.layers == ["64", "32"] and fv.mode == "train" and fv.tag == ["a"]
    assert fv.flag_values_dict()["n"] == 3 and "lr" in fv and fv["lr"].default == 0.1


def test_every_spelling_absl_accepts(fv):
    rest = fv(["prog", "pos1", "--name=abc", "-n", "5", "--lr", "-0.5", "--fast", "pos2", "--noverbose",
               "--layers=8,4,2", "--mode", "eval", "--tag", "b", "--tag=c", "--", "--name=zzz"])
    assert rest == ["prog", "pos1", "pos2", "--name=zzz"]  # "--" ends the flags and is dropped
    assert (fv.name, fv.n, fv.lr, fv.fast, fv.verbose, fv.layers, fv.mode, fv.tag) == \
        ("abc", 5, -0.5, True, False, ["8", "4", "2"], "eval", ["b", "c"])
    assert fv["n"].present == 1 and fv["name"].present == 1
    fv(["prog", "--fast=false", "--verbose=1", "--tag=d"])
    assert fv.fast is False and fv.verbose is True and fv.tag == ["d"]  # a new command line starts over


def test_unknown_flag_names_it_and_suggests(fv):
    with pytest.raises(F.UnrecognizedFlagError, match=r"Unknown command line flag 'mdoe'; did you mean --mode\?"):
        fv(["prog", "--mdoe=eval"])
    with pytest.raises(F.Error, match="'nope'"):
        fv(["prog", "--nope"])


def test_known_only_passes_unknown_flags_on_in_order(fv):
    rest = fv(["prog", "--unk=1", "x", "--n=7", "--unk2", "y"], known_only=True)
    assert rest == ["prog", "--unk=1", "x", "--unk2", "y"] and fv.n == 7


@pytest.mark.parametrize("argv,match", [
    (["p", "--n=-1"], r"flag --n: invalid value '-1': must be >= 0"),
    (["p", "--n=1.5"], r"flag --n: invalid value '1.5': expected an integer"),
    (["p", "--lr=fast"], r"flag --lr: invalid value 'fast': expected a float"),
    (["p", "--mode=test"], r"expected one of \['train', 'eval'\]"),
    (["p", "--fast=maybe"], r"flag --fast: invalid value 'maybe': expected a boolean"),
    (["p", "--name"], r"flag --name needs a value"),
])
def test_bad_values_name_the_flag_and_what_it_expects(fv, argv, match):
    with pytest.raises(F.IllegalFlagValueError, match=match):
        fv(argv)


def test_reading_an_undefined_flag_is_an_attribute_error_naming_it(fv):
    fv.mark_as_parsed()
    with pytest.raises(AttributeError, match="flag 'batch_size' is not defined"):
        fv.batch_size  # noqa: B018
    with pytest.raises(AttributeError, match="cannot set flag 'batch_size'"):
        fv.batch_size = 3


def test_setting_a_flag_converts_and_checks(fv):
    fv.n = "12"
    assert fv.n == 12
    with pytest.raises(F.IllegalFlagValueError):
        fv.n = -4


def test_duplicate_definition(fv):
    with pytest.raises(F.DuplicateFlagError, match="'name' is defined twice"):
        F.DEFINE_string("name", "y", "again", flag_values=fv)
    # absl's rule: the same module executed again (another globals dict) may redefine.
    code = "F.DEFINE_string('again', 'first', 'h', flag_values=fv)"
    for default in ("first", "second"):
        exec(code.replace("'first'", repr(default)), {"__name__": "same_module", "F": F, "fv": fv})
    assert fv["again"].default == "first"


def test_bad_defaults_and_definitions_are_rejected():
    fv = F.FlagValues()
    with pytest.raises(F.IllegalFlagValueError, match="invalid default value"):
        F.DEFINE_integer("k", "ten", "h", flag_values=fv)
    with pytest.raises(F.Error, match="identifiers"):
        F.DEFINE_string("not valid", "", "h", flag_values=fv)
    with pytest.raises(ValueError, match="enum_values must not be empty"):
        F.DEFINE_enum("e", None, [], "h", flag_values=fv)


def test_required_flags_and_validators(fv):
    F.DEFINE_string("data_dir", None, "required", flag_values=fv)
    F.mark_flag_as_required("data_dir", flag_values=fv)
    with pytest.raises(F.ValidationError, match="flag --data_dir=None: flag is required"):
        fv(["prog"])
    fv(["prog", "--data_dir=/tmp"])
    assert fv.data_dir == "/tmp"
    F.register_validator("n", lambda v: v % 2 == 1, "n must be odd", flag_values=fv)
    with pytest.raises(F.ValidationError, match="n must be odd"):
        fv(["prog", "--data_dir=/tmp", "--n=4"])


def test_first_read_parses_sys_argv_tolerating_unknown_arguments(monkeypatch):
    fv = F.FlagValues()
    F.DEFINE_integer("steps", 10, "h", flag_values=fv)
    monkeypatch.setattr(sys, "argv", ["prog", "-f", "kernel.json", "--steps=42"])  # a notebook's argv
    assert fv.steps == 42 and fv.is_parsed()
    fv.unparse_flags()
    assert not fv.is_parsed() and fv["steps"].value == 10


def test_tw_flags_is_tw_app_flags():
    assert tw.flags is tw.app.flags and tw.app.flags.FLAGS is tw.flags.FLAGS
    assert tw.flags.DEFINE_bool is tw.flags.DEFINE_boolean


def _run(code, *args):
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], capture_output=True, text=True,
                          timeout=120)
    return proc.returncode, proc.stdout, proc.stderr


PROGRAM = """
    import tensorweave as tf
    flags = tf.app.flags
    flags.DEFINE_integer("epochs", 2, "how many epochs", lower_bound=1)
    flags.DEFINE_string("model", "mlp", "which model")
    FLAGS = flags.FLAGS

    def main(argv):
        print("argv", argv[1:], "epochs", FLAGS.epochs, "model", FLAGS.model)
        return 3 if FLAGS.model == "fail" else 0

    if __name__ == "__main__":
        tf.app.run()
"""


def test_app_run_calls_main_with_the_rest_and_exits_with_its_result():
    rc, out, err = _run(PROGRAM, "--epochs=5", "extra", "--unknown_to_us=1")
    assert rc == 0, err
    # as TF1's tf.app.run: undefined flags are handed to main, not an error
    assert "argv ['extra', '--unknown_to_us=1'] epochs 5 model mlp" in out
    rc, out, _ = _run(PROGRAM, "--model", "fail")
    assert rc == 3 and "model fail" in out


def test_app_run_bad_flag_value_is_fatal_and_names_it():
    rc, out, err = _run(PROGRAM, "--epochs=0")
    assert rc == 1 and "main" not in out
    assert "FATAL Flags parsing error: flag --epochs: invalid value '0': must be >= 1" in err


def test_app_run_help_lists_the_flags():
    rc, out, _ = _run(PROGRAM, "--help")
    assert rc == 0
    assert "--epochs: how many epochs" in out and "(default: 2; int)" in out and "--model: which model" in out


def test_app_run_without_main_is_a_clear_error():
    rc, _, err = _run("import tensorweave as tf\ntf.app.run()\n")
    assert rc != 0 and "no main function given and the __main__ module has no 'main'" in err
