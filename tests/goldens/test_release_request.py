"""What a release must be given (issue 43): notes and a releaser that a manifest can keep."""

import click
import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from rag_loop.cli import release_text
from rag_loop.goldens.release import release_request_errors


@pytest.mark.parametrize("notes, released_by, error", [
    ("June refresh", "", "released_by: say who releases"), ("June refresh", "  ", "released_by: say who releases"),
    ("", "ana", "notes: say what this release changes"),
    ("June\x00refresh", "ana", "notes: a control character (U+0000) at position 5"),
    ("June", "ana\x1b[2J", "released_by: a control character (U+001B)"),
    ("x" * 10_001, "ana", "notes: 10,001 characters, at most 10,000")])
def test_a_release_without_notes_or_releaser_or_with_invisible_text_is_refused(notes, released_by, error):
    assert any(e.startswith(error) for e in release_request_errors(notes, released_by))


@given(notes=st.text(st.characters(blacklist_categories=["Cc"]), min_size=1, max_size=50).filter(str.strip),
       released_by=st.text(st.characters(blacklist_categories=["Cc"]), min_size=1, max_size=50).filter(str.strip))
def test_visible_notes_and_releaser_are_accepted(notes, released_by):
    assert release_request_errors(notes + "\n\tmore", released_by) == []


def test_the_release_command_option_refuses_an_empty_releaser():
    @click.command()
    @click.option("--notes", required=True, callback=release_text)
    @click.option("--by", "released_by", required=True, callback=release_text)
    def release(notes, released_by):  # as jobs_cli's `rag-loop release` declares them
        click.echo(f"{notes} by {released_by}")
    assert CliRunner().invoke(release, ["--notes", "June", "--by", " ana "]).output == "June by ana\n"
    refused = CliRunner().invoke(release, ["--notes", "June", "--by", ""])
    assert refused.exit_code == 2 and "say who releases" in refused.output
