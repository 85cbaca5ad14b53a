"""Word-level language modelling: tokenization, vocabulary, windows, the corpora, LSTM, GPT-2."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from gradsync.data.layouts import PTB_FILES, WIKITEXT2_FILES
from gradsync.data.spec import DataSpec
from gradsync.data.text import PennTreebank, TokenWindows, WikiText2
from gradsync.data.vocab import EOS, UNK, Vocabulary, tokenize
from gradsync.jobs.compose import ConfigError, compose_jobs
from gradsync.models.gpt2 import GPT2
from gradsync.models.lstm import LSTMLanguageModel
from tests.helpers.datagen.text import RARE, write_ptb, write_wikitext2

SPEC = DataSpec(task="language_model", vocab_size=50)


# ---- tokenization, vocabulary, windows ---------------------------------------------------------
def test_tokenize_adds_eos_per_line_and_skips_blank_lines():
    assert tokenize([" a b a ", "", "   ", "c a b"]) == ["a", "b", "a", EOS, "c", "a", "b", EOS]


def test_vocabulary_orders_by_count_then_word_and_adds_unk():
    vocab = Vocabulary.from_tokens(tokenize(["a b a", "c a b"]))
    # a:3, then <eos>:2 and b:2 (tie: "<eos>" < "b"), c:1, then <unk> appended.
    assert vocab.words == ["a", EOS, "b", "c", UNK]
    assert vocab.encode(["c", "zzz", "a"]).tolist() == [3, 4, 0]


def test_vocabulary_keeps_unk_already_in_the_corpus_in_its_place():
    vocab = Vocabulary.from_tokens(tokenize([f"x {UNK} {UNK} y"]))
    assert vocab.words == [UNK, EOS, "x", "y"]


def test_max_vocab_caps_the_size_including_unk():
    tokens = tokenize(["a a a b b c"])  # a:3 b:2 <eos>:1 c:1
    assert Vocabulary.from_tokens(tokens, max_vocab=3).words == ["a", "b", UNK]
    assert Vocabulary.from_tokens(tokens, max_vocab=3).encode(["c"]).tolist() == [2]


def test_windows_are_consecutive_non_overlapping_and_shifted_by_one():
    windows = TokenWindows(torch.arange(11), seq_len=3)
    assert len(windows) == 3  # tokens 9 and 10 cannot fill a fourth window with targets
    assert [w[0].tolist() for w in windows] == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
    assert [w[1].tolist() for w in windows] == [[1, 2, 3], [4, 5, 6], [7, 8, 9]]
    with pytest.raises(IndexError):
        windows[3]


# ---- the corpora, read through the `datasets` library -------------------------------------------
def _write(root: Path, files: dict[str, str], texts: dict[str, str]) -> None:
    for split, name in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(texts[split], encoding="utf-8")


@pytest.fixture
def text_loads(monkeypatch) -> list[tuple]:
    """Records every ``datasets.load_dataset`` call (and still runs it); skips the test where
    ``datasets`` (optional) is not installed, so that the module collects without it."""
    datasets = pytest.importorskip("datasets")
    calls: list[tuple] = []
    real = datasets.load_dataset

    def spy(*args, **kwargs):
        calls.append((args, kwargs))
        return real(*args, **kwargs)

    monkeypatch.setattr(datasets, "load_dataset", spy)
    return calls


def test_hand_made_wikitext_gives_exact_ids(tmp_path, text_loads):
    texts = {
        "train": " \n = T = \n \n a b a \n c a b \n",
        "validation": " a d \n\n b \n",
        "test": " c \n",
    }
    _write(tmp_path, WIKITEXT2_FILES, texts)
    corpus = WikiText2(root=str(tmp_path), seq_len=2, hub_name="wikitext")
    splits = corpus.load()
    # train tokens: = T = <eos> a b a <eos> c a b <eos>; counts a:3 <eos>:3 =:2 b:2 T:1 c:1
    vocab = ["<eos>", "a", "=", "b", "T", "c", UNK]
    assert splits.spec.vocab_size == len(vocab)
    ids = {w: i for i, w in enumerate(vocab)}
    words = ["=", "T", "=", EOS, "a", "b", "a", EOS, "c", "a", "b", EOS]
    stream = [ids[w] for w in words]
    assert [x.tolist() for x, _ in splits.train] == [stream[i : i + 2] for i in (0, 2, 4, 6, 8)]
    assert [y.tolist() for _, y in splits.train] == [stream[i : i + 2] for i in (1, 3, 5, 7, 9)]
    # valid: a d <eos> b <eos>, with d unseen in training -> <unk>
    x, y = splits.test[0]
    assert x.tolist() == [ids["a"], ids[UNK]] and y.tolist() == [ids[UNK], ids["<eos>"]]
    assert [c[0][0] for c in text_loads] == ["text"]
    files = text_loads[0][1]["data_files"]
    assert set(files) == {"train", "validation"}
    assert files["validation"].endswith("wiki.valid.raw")


def test_eval_split_test_reads_the_test_file(tmp_path, text_loads):
    _write(tmp_path, PTB_FILES, {"train": "a b\n", "validation": "a\n", "test": "b b b a\n"})
    splits = PennTreebank(
        root=str(tmp_path), seq_len=4, eval_split="test", hub_name="ptb_text_only"
    ).load()
    assert text_loads[0][1]["data_files"]["test"].endswith("ptb.test.txt")
    assert len(splits.test) == 1 and splits.test[0][0].tolist() == [2, 2, 2, 1]  # a b <eos> <unk>


@pytest.mark.parametrize(
    ("cls", "write"), [(WikiText2, write_wikitext2), (PennTreebank, write_ptb)]
)
def test_generated_corpora_load_through_the_text_builder(cls, write, tmp_path, text_loads):
    write(tmp_path)
    splits = cls(root=str(tmp_path), seq_len=35, hub_name="unused").load()
    assert text_loads and all(args[0] == "text" for args, _ in text_loads)
    assert splits.spec.task == "language_model" and len(splits.train) > 20
    x, y = splits.train[0]
    assert x.shape == y.shape == (35,) and x.dtype == torch.int64
    assert torch.equal(x[1:], y[:-1])
    test_ids = torch.cat([x for x, _ in splits.test])
    assert int(test_ids.max()) < splits.spec.vocab_size
    if cls is WikiText2:  # its training text has no <unk>, so <unk> is appended last
        unk = splits.spec.vocab_size - 1
        assert (test_ids == unk).any(), f"{RARE} in the valid file should map to <unk>"


@pytest.mark.parametrize(
    ("dataset", "expected"),
    [("wikitext2", "wikitext-2-raw/wiki.train.raw"), ("ptb", "ptb/ptb.train.txt")],
)
def test_missing_corpus_is_one_clear_line(dataset, expected, tmp_path):
    with pytest.raises(ConfigError) as info:
        compose_jobs(
            ["model=lstm", f"dataset={dataset}", f"dataset.root={tmp_path}"], multirun=False
        )
    text = str(info.value)
    assert "\n" not in text
    assert text.startswith(f"dataset {dataset} not found: expected {tmp_path / expected}")
    assert "dataset.download=true" in text


def test_download_does_not_require_local_files(tmp_path):
    (cfg,) = compose_jobs(
        ["model=lstm", "dataset=wikitext2", f"dataset.root={tmp_path}", "dataset.download=true"],
        multirun=False,
    )
    assert cfg.dataset.hub_name == "wikitext" and cfg.dataset.hub_config == "wikitext-2-raw-v1"


def test_tied_lstm_with_unequal_sizes_is_one_clear_line():
    with pytest.raises(ConfigError, match=r"model\.tie_weights=true needs model\.embedding_dim"):
        compose_jobs(["model=lstm", "model.hidden_size=64"], multirun=False)


# ---- models -------------------------------------------------------------------------------------
def _forward_backward(model: torch.nn.Module, length: int = 7) -> torch.Tensor:
    inputs = torch.randint(0, SPEC.vocab_size, (3, length))
    logits = model(inputs)
    assert logits.shape == (3, length, SPEC.vocab_size)
    logits.logsumexp(-1).mean().backward()
    assert all(p.grad is not None for p in model.parameters())
    return logits


def _lstm(**overrides) -> LSTMLanguageModel:
    options = dict(embedding_dim=16, hidden_size=16, num_layers=2, dropout=0.5, tie_weights=True)
    return LSTMLanguageModel(spec=SPEC, **{**options, **overrides})


def _gpt2(**overrides) -> GPT2:
    options = dict(n_layer=2, n_head=2, n_embd=16, block_size=8, dropout=0.0)
    return GPT2(spec=SPEC, **{**options, **overrides})


def test_lstm_forward_backward_and_tied_weights_share_one_tensor():
    model = _lstm()
    _forward_backward(model)
    assert model.decoder.weight is model.embedding.weight
    assert len(list(model.parameters())) == len({id(p) for p in model.parameters()})
    untied = _lstm(tie_weights=False, hidden_size=24)
    _forward_backward(untied)
    assert untied.decoder.weight.data_ptr() != untied.embedding.weight.data_ptr()


def test_lstm_tying_unequal_sizes_fails_clearly():
    with pytest.raises(ValueError, match="tie_weights=True needs embedding_dim == hidden_size"):
        _lstm(hidden_size=32)


def test_gpt2_forward_backward_and_head_tied_to_token_embedding():
    model = _gpt2()
    _forward_backward(model, length=8)
    assert model.head.weight is model.tok_emb.weight


def test_gpt2_is_causal():
    model = _gpt2().eval()
    inputs = torch.randint(0, SPEC.vocab_size, (2, 8))
    changed = inputs.clone()
    changed[:, 5] = (changed[:, 5] + 1) % SPEC.vocab_size
    with torch.no_grad():
        before, after = model(inputs), model(changed)
    torch.testing.assert_close(before[:, :5], after[:, :5], rtol=0, atol=1e-6)
    assert not torch.allclose(before[:, 5:], after[:, 5:])


def test_gpt2_rejects_inputs_longer_than_block_size():
    with pytest.raises(ValueError, match=r"input of 9 tokens is longer than model\.block_size=8"):
        _gpt2()(torch.zeros(1, 9, dtype=torch.int64))
