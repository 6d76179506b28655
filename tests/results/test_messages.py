"""results/messages.py: a pydantic error as one line a person reads, never pydantic's wording."""

from __future__ import annotations

from results.messages import plain_error


def test_typers_choice_check_reads_as_the_choices_and_what_was_given() -> None:
    # what typer's coercion raises for an Enum option given another value (bench run --parity fair)
    err = {"type": "value_error", "input": "fair", "ctx": {"error": ValueError("'fair' is not one of 'report', 'strict'.")},
           "msg": "Value error, 'fair' is not one of 'report', 'strict'."}
    assert plain_error(err, "--parity") == "--parity takes one of 'report', 'strict', got 'fair'"


def test_another_value_error_says_its_own_message_without_pydantics_prefix() -> None:
    err = {"type": "value_error", "input": "x", "ctx": {"error": ValueError("needs a finite duration.")}}
    assert plain_error(err, "--tune") == "--tune: needs a finite duration"


def test_bounds_and_types_name_the_flag_and_an_example() -> None:
    assert plain_error({"type": "greater_than_equal", "input": 0, "ctx": {"ge": 1}}, "--max-load") == \
        "--max-load must be >= 1, got 0"
    assert plain_error({"type": "int_parsing", "input": "many"}, "--threads") == \
        "--threads takes a whole number, got 'many': e.g. --threads 4"
