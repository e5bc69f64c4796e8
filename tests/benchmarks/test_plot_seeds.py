"""benchmarks/plot_seeds.py: reads runs' evaluation rows, says whether each run clears the bar, draws the figure."""
import json

from benchmarks.plot_seeds import eval_rows, main, summary_line


def _run(folder, ko_start, ko_end, lo):
    folder.mkdir()
    rows = [{"step": 0, "kind": "train", "reward": 0.4}]
    for step, ko in ((50, ko_end), (0, ko_start)):  # out of order on purpose
        rows.append({"step": step, "kind": "eval", "genselect": 0.4, "knockout/genselect": ko,
                     "knockout/genselect_lo": lo if step else ko - 0.07, "knockout/genselect_hi": ko + 0.07,
                     "majority": 0.49, "random": 0.41})
    (folder / "metrics.jsonl").write_text("\n".join(map(json.dumps, rows)) + "\n")
    return folder


def test_summary_says_the_gain_and_whether_the_lower_bound_clears_both_baselines(tmp_path):
    good = eval_rows(_run(tmp_path / "a", 0.40, 0.65, 0.57))
    assert [r["step"] for r in good] == [0, 50]
    line = summary_line("a", good)
    assert "0.400 -> 0.650" in line and "+25.0 points" in line and line.endswith("yes")
    assert summary_line("b", eval_rows(_run(tmp_path / "b", 0.40, 0.55, 0.48))).endswith("no")


def test_main_writes_the_figure(tmp_path, capsys):
    out = tmp_path / "fig.png"
    assert main([str(_run(tmp_path / "s0", 0.4, 0.6, 0.52)), str(_run(tmp_path / "s1", 0.43, 0.66, 0.58)),
                 "--out", str(out)]) == 0
    assert out.stat().st_size > 1000 and capsys.readouterr().out.count("lower bound above both") == 2


def test_round_robin_key_with_the_no_cue_panel(tmp_path, capsys):
    folder = tmp_path / "rr"
    folder.mkdir()
    rows = []
    for step, rr, nocue in ((0, 0.45, 0.44), (100, 0.70, 0.47)):
        row = {"step": step, "kind": "eval", "genselect": 0.4, "majority": 0.49, "random": 0.41,
               "round_robin/genselect": rr, "round_robin/genselect_lo": rr - 0.08, "round_robin/genselect_hi": rr + 0.08}
        row.update({"nocue/round_robin/genselect": nocue, "nocue/round_robin/genselect_lo": nocue - 0.09,
                    "nocue/round_robin/genselect_hi": nocue + 0.09, "nocue/majority": 0.42, "nocue/random": 0.39})
        rows.append(row)
    (folder / "metrics.jsonl").write_text("\n".join(map(json.dumps, rows)) + "\n")
    out = tmp_path / "fig.png"
    assert main([str(folder), "--key", "round_robin/genselect", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "rr: round_robin/genselect 0.450 -> 0.700" in printed
    assert "rr (no-cue set): round_robin/genselect 0.440 -> 0.470" in printed and "majority@N 0.420" in printed
    assert main([str(folder), "--out", str(out)]) == 2  # no knockout readings in this run
