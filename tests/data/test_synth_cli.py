"""python -m driver.synth: prepares the dataset of a config and prints its statistics from the manifest."""
import json

from driver import synth


def test_synth_prints_the_manifest_table_and_reuses_the_dataset(tmp_path, capsys):
    args = ["selector", "data.num_problems=40", f"data.out_dir={tmp_path}/ds", f"model.cache_dir={tmp_path}/m",
            "--quiet"]
    assert synth.main(args) == 0
    out = capsys.readouterr().out
    folder = next((tmp_path / "ds").iterdir())
    manifest = json.loads((folder / "manifest.json").read_text())
    assert f"procedural_math-{manifest['hash']}" in out
    for label in ("problems_kept", "prompts_over_token_budget", "majority@N", "random@N", "candidates per prompt"):
        assert label in out
    assert f"{manifest['counts']['problems_kept']:>10}" in out
    stamp = (folder / "manifest.json").stat().st_mtime_ns
    assert synth.main(args) == 0 and (folder / "manifest.json").stat().st_mtime_ns == stamp


def test_synth_rejects_a_bad_override(capsys):
    assert synth.main(["data.bad_rows=maybe", "--quiet"]) == 2
    assert "data.bad_rows" in capsys.readouterr().err


def test_a_bad_row_under_bad_rows_error_is_one_clean_error_line(tmp_path, capsys):
    """`data.bad_rows=error` stops on a bad row with one error line naming it, not a traceback."""
    good = {"id": "m1", "problem": "1+1?", "answer": "2", "candidates": ["Answer: 2", "Answer: 3"]}
    path = tmp_path / "mine.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps({**good, "id": "m2"}) + "\n" + '{"id": "m3", "problem": 7}\n')
    args = ["selector", "data.source=file", f"data.path={path}", "data.bad_rows=error", f"data.out_dir={tmp_path}/ds",
            f"model.cache_dir={tmp_path}/m", "--quiet"]
    assert synth.main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {path}:3: ") and "'problem'" in err[0]
