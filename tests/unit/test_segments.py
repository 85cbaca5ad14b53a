"""Per-segment work over a whole group at once (``gradsync/compressors/segments.py``) against one
torch reduction or elementwise op per segment: layouts with empty segments, segments shorter
than a row, boundaries on and off row edges, and a partial last row."""

from __future__ import annotations

import pytest
import torch

from gradsync.compressors.segments import ROW, segments

LAYOUTS = {
    "small": (5, 0, 1, 300, 7),
    "rows": (ROW, 3 * ROW, ROW // 2, ROW // 2, 2 * ROW),  # boundaries on row edges
    "mixed": (2 * ROW + 17, 1, 0, 5 * ROW - 3, 40, ROW + 1, 9),
    "one": (7 * ROW + 5,),
}
CPU = torch.device("cpu")


def _values(sizes: tuple[int, ...], seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    scales = torch.cat([torch.full((n,), 10.0 ** (i % 4 - 2)) for i, n in enumerate(sizes)])
    return torch.randn(sum(sizes), generator=gen) * scales + 0.01


def _per_segment(values: torch.Tensor, sizes: tuple[int, ...], reduce) -> torch.Tensor:
    return torch.stack([reduce(part.double()) for part in values.split(sizes)])


@pytest.mark.parametrize("name", LAYOUTS)
def test_sums_agree_with_a_reduction_per_segment(name):
    sizes = LAYOUTS[name]
    layout, values = segments(sizes, CPU), _values(sizes)
    expected = {
        "sums": _per_segment(values, sizes, torch.sum),
        "sums_of_squares": _per_segment(values, sizes, lambda p: (p * p).sum()),
        "sums_of_magnitudes": _per_segment(values, sizes, lambda p: p.abs().sum()),
    }
    centre = torch.linspace(-1, 1, len(sizes))
    got = layout.sums_of_squares(values, centre)
    want = torch.stack(
        [
            ((p.double() - c.double()) ** 2).sum()
            for p, c in zip(values.split(sizes), centre, strict=True)
        ]
    )
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-12, msg="centred")
    for reduction, want in expected.items():
        got = getattr(layout, reduction)(values)
        assert got.dtype == torch.float64
        # float32 rows added up in float64: a few float32 roundings per row.
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-12, msg=reduction)


@pytest.mark.parametrize("name", LAYOUTS)
def test_max_magnitudes_are_exact_and_zero_for_an_empty_segment(name):
    sizes = LAYOUTS[name]
    layout, values = segments(sizes, CPU), _values(sizes, seed=1)
    want = torch.stack(
        [part.abs().max() if part.numel() else torch.tensor(0.0) for part in values.split(sizes)]
    )
    assert torch.equal(layout.max_magnitudes(values), want)


@pytest.mark.parametrize("name", LAYOUTS)
@pytest.mark.parametrize("op", [torch.mul, torch.sub])
def test_map_applies_each_segments_value_to_its_elements_exactly(name, op):
    sizes = LAYOUTS[name]
    layout, values = segments(sizes, CPU), _values(sizes, seed=2)
    per_segment = torch.arange(1, len(sizes) + 1, dtype=torch.float32) / 3
    want = torch.cat(
        [op(part, v) for part, v in zip(values.split(sizes), per_segment, strict=True)]
    )
    assert torch.equal(layout.map(op, [values], [per_segment], out=torch.empty_like(values)), want)
    in_place = values.clone()
    assert torch.equal(layout.map(op, [in_place], [per_segment], out=in_place), want)


def test_rows_crossing_a_boundary_are_loose_and_whole_rows_are_not():
    sizes = (ROW + 3, 2 * ROW - 3, 10)  # row 0 whole, row 1 crosses, row 2 whole, tail loose
    layout = segments(sizes, CPU)
    loose = layout.loose_of(torch.arange(sum(sizes), dtype=torch.float32)).long()
    expected = list(range(ROW, 2 * ROW)) + list(range(3 * ROW, 3 * ROW + 10))
    assert loose.tolist() == expected
