"""``gradsync run`` end to end on the language-model and recommendation options: real worker
processes on tiny generated corpora, tiny models, a few steps."""

from __future__ import annotations

import math

import pytest

from tests.helpers.cli import run_cli, summary
from tests.helpers.datagen.movielens import write_movielens
from tests.helpers.datagen.text import write_wikitext2

SHORT = [
    "trainer.workers=2",
    "trainer.batch_size=8",
    "trainer.max_steps=5",
    "trainer.checkpoint=false",
]

LM_MODELS = {
    "lstm": ["model=lstm", "model.embedding_dim=32", "model.hidden_size=32"],
    "gpt2": [
        "model=gpt2",
        "model.n_layer=2",
        "model.n_head=2",
        "model.n_embd=32",
        "model.block_size=64",
    ],
}


@pytest.mark.parametrize("model", sorted(LM_MODELS))
def test_language_model_trains_on_wikitext2(model, gradsync_cmd, cli_env, tmp_path):
    write_wikitext2(tmp_path / "data")
    run_dir = tmp_path / "run"
    result = run_cli(
        gradsync_cmd,
        "run",
        *LM_MODELS[model],
        "dataset=wikitext2",
        f"dataset.root={tmp_path / 'data'}",
        *SHORT,
        f"hydra.run.dir={run_dir}",
        env=cli_env,
    )
    assert result.returncode == 0, result.stderr
    s = summary(run_dir)
    assert s["status"] == "completed" and s["error"] is None
    perplexity = s["final"]["eval/perplexity"]
    assert math.isfinite(perplexity) and perplexity > 1


def test_ncf_trains_on_movielens(gradsync_cmd, cli_env, tmp_path):
    data_overrides = write_movielens(tmp_path / "data")
    run_dir = tmp_path / "run"
    result = run_cli(
        gradsync_cmd,
        "run",
        *data_overrides,
        "dataset=movielens",
        "model=ncf",
        "model.factors=8",
        "model.mlp_layers=[16,8]",
        *SHORT,
        f"hydra.run.dir={run_dir}",
        env=cli_env,
    )
    assert result.returncode == 0, result.stderr
    s = summary(run_dir)
    assert s["status"] == "completed" and s["error"] is None
    assert 0 <= s["final"]["eval/hr@10"] <= 1
    assert math.isfinite(s["final"]["eval/loss"])
