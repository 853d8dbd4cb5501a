"""specs/shell_values.py: `quote` gives bash one word that expands to exactly the text (checked by
running bash on it), control characters are refused, and each grammar takes the values sites
document and refuses the ones that would run or break a directive."""

from __future__ import annotations

import subprocess

import pytest

from prism_strategy.specs import SpecError
from prism_strategy.specs.shell_values import check_field, quote

TEXTS = ("plain", "", "a b", "$(id)", "`id`", "'", '"', "\\", "!x", "*", "${HOME}", "a'b\"c$d`e\\f", "é ü 漢")


def test_quote_is_one_word_that_expands_to_the_text():
    script = "printf '%s\\0' " + " ".join(quote(t) for t in TEXTS)
    out = subprocess.run(["bash", "-c", script], capture_output=True, check=True).stdout
    assert out.split(b"\0")[:-1] == [t.encode() for t in TEXTS]


@pytest.mark.parametrize("text", ["a\nb", "a\rb", "a\x00b", "a\x1bb", "a\tb", "a\x7fb"])
def test_control_characters_are_refused(text):
    with pytest.raises(SpecError, match="control character"):
        quote(text, "--job-name")


# Values the sites document: ALCF's Aurora and Polaris job pages, mpiexec (PALS) --cpu-bind, Slurm.
ACCEPTED = {
    "filesystems": ["flare:home", "home:eagle", "flare:home:daos_user", "eagle"],
    "queue": ["prod", "debug", "debug-scaling", "preemptable", "capacity", "gpu,gpu-large", "workq@pbs01"],
    "walltime": ["01:00:00", "72:00:00", "0:05:00"],
    "cpu_bind": [
        "list:1-8:9-16:17-24:25-32:33-40:41-48:53-60:61-68:69-76:77-84:85-92:93-100",
        "list:24-31:16-23:8-15:0-7",
        "verbose,list:1-8:9-16",
        "depth",
        "core",
        "numa",
        "list:0,2,4:1,3,5",
        "mask:0x3:0xc",
    ],
    "master_addr_suffix": [".hsn.cm.aurora.alcf.anl.gov", "-hsn0", ".ib"],
    "account": ["AuroraGPT", "datascience", "m1234_g", "proj.x"],
    "keep_output": ["doe", "oe", "n", "eo"],
}
REFUSED = {
    "filesystems": ["flare;home", "flare:$(id)", "flare home", "flare:"],
    "queue": ["prod;x", "prod x", "$(id)", "-q"],
    "walltime": ["1h", "01:00:00;x", "01:61:00"],
    "cpu_bind": ['list:1-8"; touch x; "', "core`id`", "list:1-8 ; x", "list:", "depth,core"],
    "master_addr_suffix": ['"; touch x; "', ".hsn$(id)", ".hsn x", ".hsn;x"],
    "account": ["p $(z)", 'a"b', "p;q", "-A"],
    "keep_output": ["doe; x", "x", "dooo"],
}


@pytest.mark.parametrize(("field", "value"), [(f, v) for f, vs in ACCEPTED.items() for v in vs])
def test_documented_values_are_accepted(field, value):
    assert check_field(field, value, "platform file p.toml [launch]") == value


@pytest.mark.parametrize(("field", "value"), [(f, v) for f, vs in REFUSED.items() for v in vs])
def test_values_outside_the_grammar_are_refused_naming_field_and_file(field, value):
    with pytest.raises(SpecError) as err:
        check_field(field, value, "platform file p.toml [launch]")
    assert f"p.toml [launch]: {field}" in str(err.value) and "\n" not in str(err.value)
