"""``model=lstm``: a word-level LSTM language model (embedding, stacked LSTM, linear decoder).

Training follows truncated BPTT over the dataset's fixed-length windows: the trainer shuffles
the windows, so every forward pass starts from a zero hidden state instead of carrying the state
over from the previous window.
"""

from __future__ import annotations

from torch import Tensor, nn

from gradsync.data.spec import DataSpec

INIT_RANGE = 0.1  # uniform init of embedding and decoder, as in Zaremba et al. (2014)


class LSTMLanguageModel(nn.Module):
    def __init__(
        self,
        *,
        spec: DataSpec,
        embedding_dim: int,
        hidden_size: int,
        num_layers: int,
        dropout: float,
        tie_weights: bool,
    ) -> None:
        super().__init__()
        if tie_weights and embedding_dim != hidden_size:
            raise ValueError(
                f"tie_weights=True needs embedding_dim == hidden_size (got {embedding_dim} and "
                f"{hidden_size})"
            )
        self.embedding = nn.Embedding(spec.vocab_size, embedding_dim)
        # nn.LSTM applies its dropout between layers only; the two Dropout modules cover the
        # input embeddings and the top layer's output.
        self.lstm = nn.LSTM(
            embedding_dim,
            hidden_size,
            num_layers=num_layers,
            dropout=dropout if num_layers > 1 else 0.0,
            batch_first=True,
        )
        self.drop = nn.Dropout(dropout)
        self.decoder = nn.Linear(hidden_size, spec.vocab_size)
        nn.init.uniform_(self.embedding.weight, -INIT_RANGE, INIT_RANGE)
        nn.init.zeros_(self.decoder.bias)
        if tie_weights:
            # One matrix for both (Press & Wolf, 2017): fewer parameters, better perplexity.
            self.decoder.weight = self.embedding.weight
        else:
            nn.init.uniform_(self.decoder.weight, -INIT_RANGE, INIT_RANGE)

    def forward(self, inputs: Tensor) -> Tensor:
        """Token ids (B, T) -> next-token logits (B, T, vocab); the state starts at zero."""
        hidden, _ = self.lstm(self.drop(self.embedding(inputs)))
        return self.decoder(self.drop(hidden))
