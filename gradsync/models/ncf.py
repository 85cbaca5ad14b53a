"""``model=ncf``: NeuMF (He et al., 2017), the fusion of GMF and an MLP over user/item embeddings.

GMF multiplies a user and an item embedding elementwise; the MLP reads their concatenation
(separate embeddings, each half of ``mlp_layers[0]``). A final linear layer over both outputs
gives one logit per (user, item) pair.
"""

from __future__ import annotations

import itertools

import torch
from torch import Tensor, nn

from gradsync.data.spec import DataSpec

EMBEDDING_STD = 0.01  # the paper initializes embeddings from N(0, 0.01)


class NeuMF(nn.Module):
    def __init__(
        self, *, spec: DataSpec, factors: int, mlp_layers: list[int], dropout: float
    ) -> None:
        super().__init__()
        if not mlp_layers or mlp_layers[0] % 2 != 0:
            raise ValueError(f"mlp_layers must start with an even size, got {mlp_layers}")
        half = mlp_layers[0] // 2
        self.user_gmf = nn.Embedding(spec.num_users, factors)
        self.item_gmf = nn.Embedding(spec.num_items, factors)
        self.user_mlp = nn.Embedding(spec.num_users, half)
        self.item_mlp = nn.Embedding(spec.num_items, half)
        layers: list[nn.Module] = []
        for fan_in, fan_out in itertools.pairwise(mlp_layers):
            layers += [nn.Linear(fan_in, fan_out), nn.ReLU(), nn.Dropout(dropout)]
        self.mlp = nn.Sequential(*layers)
        self.predict = nn.Linear(factors + mlp_layers[-1], 1)
        for embedding in (self.user_gmf, self.item_gmf, self.user_mlp, self.item_mlp):
            nn.init.normal_(embedding.weight, std=EMBEDDING_STD)

    def forward(self, users: Tensor, items: Tensor) -> Tensor:
        """User and item ids (B,) -> logits (B,) that the user interacts with the item."""
        gmf = self.user_gmf(users) * self.item_gmf(items)
        mlp = self.mlp(torch.cat([self.user_mlp(users), self.item_mlp(items)], dim=-1))
        return self.predict(torch.cat([gmf, mlp], dim=-1)).squeeze(-1)
