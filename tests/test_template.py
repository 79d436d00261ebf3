"""`because` placeholders: one syntax for the loader's check, parameter discovery and filling in."""
from __future__ import annotations

from kbopt.engine.lang import template

TEXT = "At {telemetry.memory_used_ratio:.0%} over {capacity_threshold}, {Odd} and {not closed"


def test_placeholders_name_and_spec():
    assert list(template.placeholders(TEXT)) == [
        ("telemetry.memory_used_ratio", ".0%"), ("capacity_threshold", None), ("Odd", None)]


def test_only_bare_lowercase_names_can_be_parameters():
    assert template.parameter_names(TEXT) == {"capacity_threshold"}


def test_fill_leaves_text_outside_placeholders_alone():
    filled = template.fill(TEXT, lambda name, spec: f"<{name}|{spec}>")
    assert filled == ("At <telemetry.memory_used_ratio|.0%> over <capacity_threshold|None>, <Odd|None> "
                      "and {not closed")


def test_a_compiled_text_fills_as_the_text_does():
    from kbopt.engine.lang.template import compile_text, fill, fill_compiled
    for text in ["", "plain", "{a}", "x {a} y {b:.0%} z", "{a}{b}", "braces { not } {c:>4}!", "{a.b.c:.2f} end"]:
        def value(name, spec):
            return f"<{name}|{spec}>"
        assert fill_compiled(compile_text(text), value) == fill(text, value)
