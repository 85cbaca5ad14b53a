"""``model=gpt2``: a decoder-only transformer in the GPT-2 layout, sized by config.

Token plus learned position embeddings, ``n_layer`` pre-LayerNorm blocks (causal self-attention,
then a 4x GELU MLP, each added to the residual stream), a final LayerNorm, and an output head
that shares the token embedding matrix.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from gradsync.data.spec import DataSpec

INIT_STD = 0.02  # GPT-2's initializer range


class CausalSelfAttention(nn.Module):
    def __init__(self, *, n_embd: int, n_head: int, dropout: float) -> None:
        super().__init__()
        if n_embd % n_head != 0:
            raise ValueError(f"n_embd ({n_embd}) must be a multiple of n_head ({n_head})")
        self.n_head = n_head
        self.qkv = nn.Linear(n_embd, 3 * n_embd)
        self.proj = nn.Linear(n_embd, n_embd)
        self.dropout = dropout
        self.resid_drop = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        batch, length, width = x.shape
        # (B, T, 3C) -> three (B, heads, T, C/heads) tensors.
        q, k, v = (
            self.qkv(x)
            .view(batch, length, 3, self.n_head, width // self.n_head)
            .permute(2, 0, 3, 1, 4)
        )
        attended = F.scaled_dot_product_attention(
            q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=True
        )
        merged = attended.transpose(1, 2).reshape(batch, length, width)
        return self.resid_drop(self.proj(merged))


class MLP(nn.Module):
    def __init__(self, *, n_embd: int, dropout: float) -> None:
        super().__init__()
        self.fc = nn.Linear(n_embd, 4 * n_embd)
        self.act = nn.GELU(approximate="tanh")  # the approximation GPT-2 was trained with
        self.proj = nn.Linear(4 * n_embd, n_embd)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.drop(self.proj(self.act(self.fc(x))))


class Block(nn.Module):
    """Pre-LN: each sublayer sees a normalized input and adds its output to the residual."""

    def __init__(self, *, n_embd: int, n_head: int, dropout: float) -> None:
        super().__init__()
        self.ln_attn = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd=n_embd, n_head=n_head, dropout=dropout)
        self.ln_mlp = nn.LayerNorm(n_embd)
        self.mlp = MLP(n_embd=n_embd, dropout=dropout)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.ln_attn(x))
        return x + self.mlp(self.ln_mlp(x))


class GPT2(nn.Module):
    def __init__(
        self,
        *,
        spec: DataSpec,
        n_layer: int,
        n_head: int,
        n_embd: int,
        block_size: int,
        dropout: float,
    ) -> None:
        super().__init__()
        self.block_size = block_size
        self.tok_emb = nn.Embedding(spec.vocab_size, n_embd)
        self.pos_emb = nn.Embedding(block_size, n_embd)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(
            Block(n_embd=n_embd, n_head=n_head, dropout=dropout) for _ in range(n_layer)
        )
        self.ln_final = nn.LayerNorm(n_embd)
        self.head = nn.Linear(n_embd, spec.vocab_size, bias=False)
        self.head.weight = self.tok_emb.weight  # tied: one matrix embeds and predicts
        self._init_weights(n_layer)

    def _init_weights(self, n_layer: int) -> None:
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, mean=0.0, std=INIT_STD)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)
        # GPT-2 scales the layers that write into the residual stream by 1/sqrt(2 * n_layer),
        # so the stream's variance does not grow with depth.
        for block in self.blocks:
            assert isinstance(block, Block)
            for proj in (block.attn.proj, block.mlp.proj):
                nn.init.normal_(proj.weight, mean=0.0, std=INIT_STD / math.sqrt(2 * n_layer))

    def forward(self, inputs: Tensor) -> Tensor:
        """Token ids (B, T) -> next-token logits (B, T, vocab); position t sees tokens <= t."""
        length = inputs.shape[1]
        if length > self.block_size:
            raise ValueError(
                f"input of {length} tokens is longer than model.block_size={self.block_size}; "
                "raise model.block_size or lower dataset.seq_len"
            )
        positions = torch.arange(length, device=inputs.device)
        x = self.drop(self.tok_emb(inputs) + self.pos_emb(positions))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_final(x))
