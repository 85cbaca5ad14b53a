"""Generated cluster descriptions (``gradsync simulate --cluster FILE.yaml``) against the very
function the command reads them with (``cluster_spec.load``), and the cluster built from what
it returns (``Described``): files of the schema's keys with generated values (special floats,
huge, negative and zero numbers, strings, lists, nulls), random text, and the shipped files
damaged (cut at any length, characters put in or taken out, random bytes).

The property: ``load`` returns a description whose every number is finite and within the
bounds this file states, or raises ValueError with one line that names the file (the line the
command prints); never another exception, and never slowly (no alias is expanded)."""

from __future__ import annotations

import math
import tempfile
import time
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gradsync.cluster.rates import bits_per_s
from gradsync.projection.cluster import Cluster
from gradsync.projection.cluster_spec import ClusterSpec, Described, load

REPO = Path(__file__).resolve().parents[2]
SHIPPED = [path.read_bytes() for path in sorted((REPO / "benchmarks/clusters").glob("*.yaml"))]
EVERY_KEY = b"""workers: 8
bandwidth: 10gbit
latency: 2.0e-5
algorithm: tree
gpus_per_node: 4
intra_bandwidth: 100gbit
compute: {forward: 0.05, backward: 0.1, update: 0.01}
selection:
  topk: {d_log2_d: 2.2e-10}
  dgc: {per_element: 1.0e-9}
collectives:
  all_reduce: [{alpha: 1.0e-4, beta: 1.0e-9}]
  all_gather: [{workers: 8, alpha: 4.0e-3, beta: 1.5e-8}]
  broadcast: [{alpha: 1.0e-4, beta: 1.0e-9, workers: null}]
  point_to_point: [{alpha: 5.0e-5, beta: 8.0e-10}]
"""
SEEDS = [*SHIPPED, EVERY_KEY]
BOUNDS = {
    "workers": (1, 1_000_000),
    "latency": (0, 60),
    "gpus_per_node": (1, 64),
    "seconds": (0, 3600),
    "forward": (0, 3600),
    "backward": (0, 3600),
    "update": (0, 3600),
    "throughput": (0, 1e9),
    "d_log2_d": (0, 1e-3),
    "per_element": (0, 1e-3),
    "alpha": (0, 60),
    "beta": (0, 1e-3),
}
"""Every number of a description, by its key's name: what a cluster can have (stated here
apart from the schema's own declarations, which are what is tested)."""
RATES = ("bandwidth", "intra_bandwidth")
SECONDS_PER_EXAMPLE = 5.0  # an expanded alias bomb takes minutes; a plain file milliseconds
PROPERTY = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)

# ---- generated values -------------------------------------------------------------------
_SPECIAL = [0, 1, -1, 0.0, -0.0, 5e-324, 1e-300, 1e308, 2**63, 65, 1_000_001, 16, 2.5, 60.0001]
_floats = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(min_value=0, max_value=1e4),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.sampled_from(_SPECIAL),
)
_integers = st.one_of(
    st.integers(min_value=-(10**30), max_value=10**30),
    st.integers(min_value=0, max_value=100),
    st.sampled_from([n for n in _SPECIAL if isinstance(n, int)]),
)
_rates = st.one_of(
    st.sampled_from(["1gbit", "0mbit", "0.0bit", "10000gbit", "10001gbit", "fast", "", "1e3gbit"]),
    st.from_regex(r"\d{1,7}(\.\d{1,3})?(bit|kbit|mbit|gbit)", fullmatch=True),
)
_scalars = st.one_of(_floats, _rates, st.text(max_size=8), st.booleans(), st.none())
_anything = st.one_of(_scalars, st.lists(_scalars, max_size=3), st.just({"x": 1}))


def _some(keys: dict[str, st.SearchStrategy[Any]]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({}, optional=keys)


def _description(value: Any) -> st.SearchStrategy[dict[str, Any]]:
    """Descriptions of the schema's keys, each value drawn from ``value(strategy)``: the
    strategy of the key's own type, or that and anything else."""
    fit = _some({"alpha": value(_floats), "beta": value(_floats), "workers": value(_integers)})
    fits = value(st.lists(fit, max_size=3))
    selection = _some({"d_log2_d": value(_floats), "per_element": value(_floats)})
    compute = {name: value(_floats) for name in ("seconds", "forward", "backward", "update")}
    return _some(
        {
            "workers": value(_integers),
            "bandwidth": value(_rates),
            "latency": value(_floats),
            "algorithm": value(st.sampled_from(["ring", "tree", "butterfly"])),
            "gpus_per_node": value(_integers),
            "intra_bandwidth": value(_rates),
            "compute": value(_some({**compute, "throughput": value(_floats)})),
            "selection": value(
                st.dictionaries(st.sampled_from(["topk", "dgc", "zip"]), selection, max_size=2)
            ),
            "collectives": value(
                _some({name: fits for name in ("all_reduce", "all_gather", "broadcast")})
            ),
        }
    )


_typed = _description(lambda strategy: strategy)
_loose = _description(lambda strategy: st.one_of(strategy, _anything))


# ---- damaged files ----------------------------------------------------------------------
_TOKENS = [b"*a", b"&a ", b"<<: *a", b"[", b"]", b"{", b"}", b": ", b"\n", b"\t", b"- ", b"---\n"]
_TOKENS += [b"!!binary ", b"!!python/object:os.system ", b".nan", b"1e308", b"#", b"\x00", b"\xff"]
_TOKENS += [b"workers: ", b"  ", b"'", b'"', b"${workers}", b"? ", b"\xef\xbb\xbf", b"%YAML 1.1\n"]


@st.composite
def _damaged(draw: st.DrawFn) -> bytes:
    """A seed file cut, with something put in, or with a stretch taken out or overwritten."""
    data = draw(st.sampled_from(SEEDS))
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        at = draw(st.integers(min_value=0, max_value=len(data)))
        how = draw(st.sampled_from(["cut", "insert", "delete", "overwrite"]))
        if how == "cut":
            data = data[:at]
        elif how == "insert":
            piece = draw(st.one_of(st.sampled_from(_TOKENS), st.binary(min_size=1, max_size=8)))
            data = data[:at] + piece + data[at:]
        elif how == "delete":
            data = data[:at] + data[at + draw(st.integers(min_value=1, max_value=40)) :]
        else:
            piece = draw(st.binary(min_size=1, max_size=8))
            data = data[:at] + piece + data[at + len(piece) :]
    return data


# ---- the property -----------------------------------------------------------------------
def _numbers_of(spec: Any, key: str = "") -> list[tuple[str, Any]]:
    """(key's name, value) of every number and rate of a description, nested ones too."""
    found: list[tuple[str, Any]] = []
    for each in fields(spec):
        value = getattr(spec, each.name)
        if is_dataclass(value):
            found += _numbers_of(value, each.name)
        elif isinstance(value, list):
            found += [pair for entry in value for pair in _numbers_of(entry, each.name)]
        elif isinstance(value, dict):
            found += [pair for entry in value.values() for pair in _numbers_of(entry, each.name)]
        elif value is not None and each.name in (*BOUNDS, *RATES):
            found.append((each.name, value))
    return found


def _assert_read_or_refused(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "cluster.yaml"
        path.write_bytes(data)
        started = time.monotonic()
        try:
            spec = load(path, [])
        except ValueError as exc:
            message = str(exc)
            assert len(message.splitlines()) == 1 and "\n" not in message, message
            assert str(path) in message, message
            return
        finally:
            assert time.monotonic() - started < SECONDS_PER_EXAMPLE
        assert isinstance(spec, ClusterSpec)
        for name, value in _numbers_of(spec):
            if name in RATES:
                assert 0 < bits_per_s(value) <= 1e13, (name, value)
                continue
            low, high = BOUNDS[name]
            assert not isinstance(value, bool) and math.isfinite(value), (name, value)
            assert low <= value <= high, (name, value)
        _assert_builds_or_refuses(Described(spec))


def _assert_builds_or_refuses(described: Described) -> None:
    """What the command does next with a description read: a refusal is one line too."""
    for build in (
        lambda: described.cluster(Cluster(workers=2, bandwidth_bps=1e9)),
        described.compute,
        lambda: described.selection(["topk", "dgc", "none"]),
    ):
        try:
            built = build()
        except ValueError as exc:
            assert "\n" not in str(exc), str(exc)
            continue
        if isinstance(built, Cluster):
            numbers = [built.bandwidth_bps, built.latency_s, built.intra_bandwidth_bps]
            assert all(math.isfinite(n) for n in numbers), built


@PROPERTY
@given(description=st.one_of(_typed, _loose))
def test_a_description_of_the_schemas_keys_is_read_in_range_or_refused_in_one_line(description):
    _assert_read_or_refused(yaml.safe_dump(description).encode())


@PROPERTY
@given(data=_damaged())
def test_a_damaged_cluster_file_is_read_in_range_or_refused_in_one_line(data):
    _assert_read_or_refused(data)


@PROPERTY
@given(text=st.text(alphabet=st.characters(codec="utf-8"), max_size=200))
def test_any_text_is_read_in_range_or_refused_in_one_line(text):
    _assert_read_or_refused(text.encode("utf-8", "surrogatepass"))


def test_the_seeds_are_cluster_descriptions():
    """The damage starts from files that are read whole (else it proves little)."""
    for data in SEEDS:
        with tempfile.TemporaryDirectory() as scratch:
            path = Path(scratch) / "cluster.yaml"
            path.write_bytes(data)
            assert load(path, []).workers in (8, 16)
