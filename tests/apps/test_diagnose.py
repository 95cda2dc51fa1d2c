"""`ragen diagnose`: the RV pre-check on the shipped sample, malformed lines, and --model cross-scoring."""

from __future__ import annotations

import argparse
import io
import json
import math
import statistics
from pathlib import Path

import pytest
import torch

from ragen_core.apps import diagnose
from ragen_core.math.mi import cross_score_naive, mi_proxies

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "rollouts_sample.jsonl"


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser()
    diagnose.add_arguments(parser)
    out, err = io.StringIO(), io.StringIO()
    rc = diagnose.run(parser.parse_args(argv), out=out, err=err)
    return rc, out.getvalue(), err.getvalue()


def ref_group_variances(path: Path) -> dict:
    groups: dict = {}
    for line in path.read_text().splitlines():
        obj = json.loads(line)
        groups.setdefault(obj["group"], []).append(obj["reward"])
    out = {}
    for g, rs in groups.items():
        m = sum(rs) / len(rs)
        out[g] = sum((r - m) ** 2 for r in rs) / (len(rs) - 1)
    return out


def test_sample_file_is_reproducible_from_its_seed(tmp_path):
    regenerated = tmp_path / "sample.jsonl"
    diagnose.write_rollouts(diagnose.simulate_bimodal_rollouts(n_groups=32, group_size=8, seed=0), regenerated)
    assert regenerated.read_bytes() == SAMPLE.read_bytes()


def test_sample_report_matches_independent_computation():
    rc, out, err = run_cli([str(SAMPLE), "--json"])
    assert rc == 0 and err == ""
    report = json.loads(out)["rv"]
    v = list(ref_group_variances(SAMPLE).values())
    assert report["n_groups"] == 32 and report["n_rollouts"] == 256
    assert report["rv_mean"] == pytest.approx(statistics.fmean(v))
    assert report["rv_std"] == pytest.approx(statistics.pstdev(v))
    assert report["rv_heterogeneity"] == pytest.approx(statistics.pstdev(v) / statistics.fmean(v))
    assert report["rv_heterogeneity"] > 1.0  # the sample is bimodal by construction
    assert report["zero_fraction"] == pytest.approx(sum(x <= 1e-10 for x in v) / len(v))
    # top_p 0.9 by hand: smallest prefix of the descending variances reaching 90% of the total
    ordered = sorted(v, reverse=True)
    acc, k = 0.0, 0
    while acc < 0.9 * sum(v):
        acc += ordered[k]
        k += 1
    assert report["top_p"]["kept_groups"] == k


def test_sample_text_output_has_precheck_and_histogram():
    rc, out, _ = run_cli([str(SAMPLE)])
    assert rc == 0
    assert "RV heterogeneity (std/mean)" in out
    assert "zero-variance groups" in out
    assert "top_p rho=0.9" in out
    assert "Histogram" in out and "#" in out


def test_main_entry_point(capsys):
    assert diagnose.main([str(SAMPLE), "--keep-rate", "0.5", "--score", "std"]) == 0
    assert "top_p rho=0.5 (std)" in capsys.readouterr().out


def test_malformed_lines_reported_with_line_numbers(tmp_path):
    path = tmp_path / "bad.jsonl"
    lines = [
        '{"group": 0, "reward": 1.0}',
        "{not json",
        '{"group": 0, "reward": 0.0}',
        '{"group": 1}',
        '{"group": 1, "reward": "high"}',
        "",
        '[1, 2]',
        '{"group": 1, "reward": 0.5}',
        '{"group": 1, "reward": 1.5, "prompt": 3}',
        '{"group": 1, "reward": 0.0}',
    ]
    path.write_text("\n".join(lines) + "\n")
    rc, out, err = run_cli([str(path)])
    assert rc == 1
    for number in (2, 4, 5, 7, 9):
        assert f"line {number}:" in err
    assert "line 6" not in err  # a blank line is not a record
    assert "5 malformed line(s)" in err
    assert "rollouts: 4 in 2 groups" in out  # the valid lines are still analysed


def test_unreadable_or_empty_input(tmp_path):
    rc, _, err = run_cli([str(tmp_path / "missing.jsonl")])
    assert rc == 2 and "cannot read" in err
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    rc, _, err = run_cli([str(empty)])
    assert rc == 2 and "no valid rollouts" in err
    rc, _, err = run_cli([str(SAMPLE), "--keep-rate", "0"])
    assert rc == 2 and "--keep-rate" in err


def test_small_and_nan_groups_are_reported(tmp_path):
    path = tmp_path / "r.jsonl"
    rows = [{"group": "a", "reward": 1.0}, {"group": "a", "reward": 0.0}, {"group": "b", "reward": 1.0},
            {"group": "c", "reward": math.nan}, {"group": "c", "reward": 1.0}]
    diagnose.write_rollouts(rows, path)
    rc, out, _ = run_cli([str(path)])
    assert rc == 0
    assert "1 group(s) have fewer than 2 rollouts" in out
    assert "1 group(s) have a NaN reward" in out


def test_subcommand_wiring():
    # how the lead wires it into `ragen`: a sub-parser plus run(args)
    parser = argparse.ArgumentParser(prog="ragen")
    sub = parser.add_subparsers(dest="command")
    diagnose.add_arguments(sub.add_parser("diagnose"))
    args = parser.parse_args(["diagnose", str(SAMPLE), "--bins", "4"])
    assert args.command == "diagnose"
    assert diagnose.run(args, out=io.StringIO(), err=io.StringIO()) == 0


# --------------------------------------------------------------------------------------------------------------
# --model: a tiny byte-level model and tokenizer saved to disk
# --------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    transformers = pytest.importorskip("transformers")
    tokenizers = pytest.importorskip("tokenizers")
    alphabet = sorted(tokenizers.pre_tokenizers.ByteLevel.alphabet())
    tok = tokenizers.Tokenizer(tokenizers.models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    path = tmp_path_factory.mktemp("tiny_lm")
    transformers.PreTrainedTokenizerFast(tokenizer_object=tok).save_pretrained(path)
    config = transformers.Qwen2Config(vocab_size=len(alphabet), hidden_size=32, intermediate_size=64,
                                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                      max_position_embeddings=512)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        transformers.Qwen2ForCausalLM(config).save_pretrained(path)
    return path


def test_model_cross_scoring_reports_mi(model_dir, tmp_path):
    import transformers

    rows = [json.loads(line) for line in SAMPLE.read_text().splitlines()]
    small = [r for r in rows if r["group"] < 3]
    small = [r for i, r in enumerate(small) if i % 8 < 2]  # 3 groups x 2 rollouts
    path = tmp_path / "small.jsonl"
    diagnose.write_rollouts(small, path)
    rc, out, err = run_cli([str(path), "--model", str(model_dir), "--json", "--batch-tokens", "2000"])
    assert rc == 0, err
    mi = json.loads(out)["mi"]
    assert mi["n_prompts"] == 3 and mi["group_size"] == 2
    # the rollouts do not name their sampler: the proxies are the scorer's view, the regime is withheld
    assert mi["scorer_is_sampler"].startswith("unknown") and mi["regime"].startswith("withheld")
    rc, out, err = run_cli([str(path), "--model", str(model_dir), "--json", "--batch-tokens", "2000",
                            "--scorer-is-sampler"])
    assert rc == 0, err
    sampled = json.loads(out)["mi"]
    assert sampled["regime"] in ("diverse_reasoning", "template_collapse", "compressed_reasoning",
                                 "low_entropy_collapse")
    # 3 prompts allow 6 relabellings: no reading can be told from chance, which the report says
    assert sampled["regime_resolved"] is False and sampled["mi_seq_p_value"] >= 1 / 6
    assert any("only 6 relabellings" in n for n in sampled["notes"]), sampled["notes"]
    # independent route: the naive per-pair scorer on the same texts
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir)
    prompts = [next(r["prompt"] for r in small if r["group"] == g) for g in range(3)]
    responses = [[r["response"] for r in small if r["group"] == g] for g in range(3)]
    L, lengths = cross_score_naive(model, prompts, responses, tokenizer=tokenizer, return_lengths=True)
    ref = mi_proxies(L, lengths)
    for key in ("mi_est", "mi_seq_est", "retrieval_acc", "cond_entropy_est"):
        assert mi[key] == pytest.approx(ref[key], abs=1e-4), key
    # an untrained model: its text is near noise (H(Z|X) near log V = log 256), which the notes say
    assert ref["cond_entropy_est"] >= 0.5 * math.log(256)
    assert any("near noise" in n for n in mi["notes"]), mi["notes"]
    rc, text, _ = run_cli([str(path), "--model", str(model_dir)])
    assert rc == 0 and "MI-Seq-Est" in text and "regime" in text and "near noise" in text
    assert "permutation p = " in text
    rc, text, _ = run_cli([str(path), "--model", str(model_dir), "--scorer-is-sampler"])
    assert rc == 0 and "(unresolved: too few prompts" in text


def test_a_model_folder_missing_weights_is_refused_not_scored_with_random_ones(model_dir, tmp_path):
    """transformers initialises weights missing from the checkpoint at random and only logs it: the MI would have
    been computed with noise."""
    import shutil

    from safetensors.torch import load_file, save_file

    broken = tmp_path / "broken"
    shutil.copytree(model_dir, broken)
    weights = load_file(broken / "model.safetensors")
    del weights[next(k for k in weights if "layers.1.mlp.down_proj" in k)]
    save_file(weights, broken / "model.safetensors", metadata={"format": "pt"})
    rows = [json.loads(line) for line in SAMPLE.read_text().splitlines()]
    path = tmp_path / "small.jsonl"
    diagnose.write_rollouts([r for i, r in enumerate(r for r in rows if r["group"] < 3) if i % 8 < 2], path)
    rc, _, err = run_cli([str(path), "--model", str(broken)])
    assert rc == 2 and "lacks 1 weight" in err and "down_proj" in err


def test_model_needs_prompt_and_response(model_dir, tmp_path):
    path = tmp_path / "noprompt.jsonl"
    diagnose.write_rollouts([{"group": g, "reward": float(k)} for g in range(2) for k in range(2)], path)
    rc, _, err = run_cli([str(path), "--model", str(model_dir)])
    assert rc == 2 and "'prompt' and 'response'" in err


def test_group_variance_ignores_rollout_order_so_ties_break_by_group_index():
    """Equal groups listed in another order must tie exactly (the filter's rule), whatever the rounding."""
    import random

    rng = random.Random(7)
    order_sensitive = 0
    for _ in range(3000):
        rewards = [rng.random() * rng.choice((1, 3, 10)) for _ in range(rng.randint(3, 9))]
        shuffled = rewards[:]
        rng.shuffle(shuffled)
        plain = [statistics.fmean(rewards), statistics.fmean(shuffled)]
        # The order-dependent sum the old code used: differs in the last bits on a good share of these groups.
        unsorted = [sum((x - m) ** 2 for x in r) for r, m in zip((rewards, shuffled), plain)]
        order_sensitive += unsorted[0] != unsorted[1]
        assert diagnose._group_variance(rewards, 1) == diagnose._group_variance(shuffled, 1)
        assert diagnose._group_variance(rewards, 1) == pytest.approx(statistics.variance(rewards), rel=1e-12)
    assert order_sensitive > 300  # the test's groups do exercise rounding
    assert math.isnan(diagnose._group_variance([0.0, math.nan, 1.0], 1))
    assert math.isnan(diagnose._group_variance([1.0], 1))
    # Two groups with the same rewards in another order: top-p keeps the first listed, as select_groups does.
    a, b = [0.1, 0.7, 0.2, 0.95], [0.95, 0.2, 0.1, 0.7]
    rollouts = [diagnose.Rollout(line=0, group=g, reward=x) for g, rs in (("a", a), ("b", b), ("c", [0.0] * 4))
                for x in rs]
    report = diagnose.rv_report(diagnose.group_rollouts(rollouts), keep_rate=0.5)
    assert report["variances"]["a"] == report["variances"]["b"]
    assert report["top_p"]["kept"] == ["a"]
    from ragen_core.math.filtering import reward_variance, select_groups

    v = reward_variance(torch.tensor([a, b, [0.0] * 4], dtype=torch.float64))
    assert v[0] == v[1]
    kept = select_groups(v, strategy="top_p", value=0.5, include_zero=True, order="largest", eps=0.0).kept
    assert [int(i) for i in kept] == [0]


def test_the_regime_needs_the_sampler_as_scorer(model_dir, tmp_path):
    import transformers

    from ragen_core.policy.identity import weights_sha256

    sha = weights_sha256(transformers.AutoModelForCausalLM.from_pretrained(model_dir))
    rows = [json.loads(line) for line in SAMPLE.read_text().splitlines()]
    small = [r for i, r in enumerate(r for r in rows if r["group"] < 3) if i % 8 < 2]
    for name, tag, expect in (("same", sha, "yes"), ("other", "0" * 64, "no")):
        path = tmp_path / f"{name}.jsonl"
        diagnose.write_rollouts([{**r, "model": tag} for r in small], path)
        rc, out, err = run_cli([str(path), "--model", str(model_dir), "--json", "--batch-tokens", "2000"])
        assert rc == 0, err
        mi = json.loads(out)["mi"]
        assert mi["scorer_is_sampler"].startswith(expect)
        assert mi["regime"].startswith("withheld") == (expect == "no")


def test_a_folder_without_rollouts_is_one_line(tmp_path):
    rc, _, err = run_cli([str(tmp_path)])
    assert rc == 2 and "rollouts.jsonl" in err and len(err.strip().splitlines()) == 1


def test_a_bfloat16_model_is_recognised_as_its_own_sampler(model_dir, tmp_path):
    """The scorer's fingerprint is its weights as saved: a bfloat16 run's model (the Qwen presets' dtype) scored in
    float32 must still name the weights its rollouts name, or its own rollouts read "no" and the regime is
    withheld."""
    import torch
    import transformers

    from ragen_core.policy.identity import weights_sha256

    bf16_dir = tmp_path / "bf16"
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir).to(torch.bfloat16)
    model.save_pretrained(bf16_dir)
    transformers.AutoTokenizer.from_pretrained(model_dir).save_pretrained(bf16_dir)
    sha = weights_sha256(model)
    rows = [json.loads(line) for line in SAMPLE.read_text().splitlines()]
    small = [r for i, r in enumerate(r for r in rows if r["group"] < 3) if i % 8 < 2]
    path = tmp_path / "own.jsonl"
    diagnose.write_rollouts([{**r, "model": sha} for r in small], path)
    rc, out, err = run_cli([str(path), "--model", str(bf16_dir), "--json", "--batch-tokens", "2000"])
    assert rc == 0, err
    mi = json.loads(out)["mi"]
    assert mi["scorer_is_sampler"].startswith("yes"), mi["scorer_is_sampler"]
