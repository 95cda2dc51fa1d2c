"""benchmarks/bench_end_to_end.py's table, on hand-made pairs."""

from benchmarks.bench_end_to_end import PHASES, markdown


def _side(wall, sft, steps, evals, probes):
    phases = {"warm start": sft, "RL steps": steps, "validations": evals, "probes": probes}
    phases["start-up and files"] = wall - sum(phases.values())
    return {"wall_s": wall, "phases": phases, "steps": 20}


def test_the_table_reads_each_pair_and_the_totals():
    pairs = [{"seed": 13, "baseline": _side(330.0, 200.0, 60.0, 10.0, 40.0),
              "now": _side(165.0, 90.0, 30.0, 5.0, 30.0)},
             {"seed": 14, "baseline": _side(300.0, 180.0, 60.0, 10.0, 40.0),
              "now": _side(150.0, 80.0, 30.0, 5.0, 25.0)}]
    for p in pairs:
        p["speedup"] = p["baseline"]["wall_s"] / p["now"]["wall_s"]
        assert abs(sum(p["now"]["phases"][k] for k in PHASES) - p["now"]["wall_s"]) < 1e-9
    result = {"baseline": "43a82f3", "config": "collapse_sokoban", "steps": 20, "pairs": pairs,
              "summary": {"speedup_total": 630.0 / 315.0, "speedup_min": 2.0, "speedup_max": 2.0}}
    text = markdown(result)
    row = "| 13 | 330 | 165 | 2.00x | 200.0 -> 90.0 | 60.0 -> 30.0 | 10.0 -> 5.0 | 40.0 -> 30.0 | 20.0 -> 10.0 |"
    assert row in text
    assert "2.00x on the summed wall time" in text and "the target is 3x" in text
