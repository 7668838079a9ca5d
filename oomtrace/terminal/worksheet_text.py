"""``oomtrace budget`` on a terminal: one line per quantity (label, value with its unit, the
formula or assumption beside it), then the assumptions, then the admission ledger. Request ids
come from user files and are escaped (:func:`oomtrace.escape.terminal`). The JSON document is
:mod:`oomtrace.budget.worksheet_json`."""

from __future__ import annotations

from oomtrace import escape
from oomtrace.budget.kv import KVGroup
from oomtrace.budget.layers import AttentionLayer
from oomtrace.budget.ledger import Ledger
from oomtrace.budget.vllm_reservation import EngineView
from oomtrace.budget.worksheet import Worksheet
from oomtrace.units import format_bytes

LEDGER_ROWS_SHOWN = 20
# Request ids from user files are cut to this many characters.
EXAMPLE_WIDTH = 40  # a skipped row's example is cut; request ids never are
_KIND_LABEL = {"full": "full", "sliding": "sliding", "chunked": "chunked", "mla": "MLA"}


def _b(value: int) -> str:
    return f"{value:,} B"


def _line(sign: str, label: str, value: str, note: str) -> str:
    return f"{sign} {label:<28}{value:>16}   {note}".rstrip()


def _layer_of(ws: Worksheet, group: KVGroup) -> AttentionLayer | None:
    return next(
        (a for a in ws.arch.attention if a.kind == group.kind and a.window == group.window), None
    )


def _per_layer_formula(ws: Worksheet, group: KVGroup) -> str:
    e, dtype = ws.spec.kv_element_bytes, ws.spec.kv_dtype
    layer = _layer_of(ws, group)
    if layer is None:
        return f"{_b(group.bytes_per_token)} ({dtype})"
    if group.kind == "mla":
        return (
            f"{layer.head_dim} (kv_lora_rank + qk_rope_head_dim) x {e} B ({dtype}), no K/V factor"
        )
    heads = group.bytes_per_token // ((layer.head_dim + layer.head_dim_v) * e)
    return f"2 (K,V) x {heads} KV heads x {layer.head_dim} head dim x {e} B ({dtype})"


def _kv_lines(ws: Worksheet) -> list[str]:
    spec = ws.spec
    groups = spec.groups
    value = format_bytes(spec.kv_bytes_per_token)
    if not groups:
        return [_line(" ", "KV per stored token", "0 B", "no attention layers: state only")]
    counts = " + ".join(f"{g.layers} {_describe(g)}" for g in groups)
    total = f"= {_b(spec.kv_bytes_per_token)}"
    if len({g.bytes_per_token for g in groups}) == 1:
        layers = f"{counts} layers" if len(groups) == 1 else f"({counts}) layers"
        note = f"{layers} x {_per_layer_formula(ws, groups[0])} {total}"
    else:
        note = " + ".join(f"{g.layers} {_describe(g)} x {_b(g.bytes_per_token)}" for g in groups)
        note += f" {total}"
    if len(groups) > 1:
        note += ", below every window"
    lines = [_line(" ", "KV per stored token", value, note)]
    if spec.unbounded_kv_bytes_per_token != spec.kv_bytes_per_token:
        grows = [g for g in groups if g.kind in ("full", "mla")]
        growth = " + ".join(f"{g.layers} {_describe(g)} x {_b(g.bytes_per_token)}" for g in grows)
        note = f"{growth} per token; windowed layers stop growing"
        if not grows:
            note = "every layer is windowed: a sequence stops growing at its window"
        value = format_bytes(spec.unbounded_kv_bytes_per_token)
        lines.append(_line(" ", "KV growth once windows full", value, note))
    return lines


def _describe(g: KVGroup) -> str:
    if g.kind == "sliding":
        return f"sliding (W={g.window:,})" if g.window else "sliding"
    if g.kind == "chunked":
        return f"chunked (C={g.window:,})" if g.window else "chunked"
    return _KIND_LABEL[g.kind]


def _state_line(ws: Worksheet) -> list[str]:
    spec = ws.spec
    if not spec.state_groups:
        return []
    parts = []
    for s in spec.state_groups:
        name = {"mamba1": "Mamba-1", "mamba2": "Mamba-2", "gdn": "Gated DeltaNet"}[s.kind]
        parts.append(f"{s.layers} {name} x ({_b(s.conv_bytes)} conv + {_b(s.ssm_bytes)} state)")
    dtypes = (
        f"conv {spec.conv_state_dtype}, state {spec.ssm_state_dtype}; not changed by the KV dtype"
    )
    value = format_bytes(spec.state_bytes_per_sequence)
    return [
        _line(" ", "recurrent state / sequence", value, " + ".join(parts)),
        _line(" ", "", "", f"  {dtypes}"),
    ]


def _sequence_note(ws: Worksheet) -> str:
    n = ws.contract.stored_tokens
    spec = ws.spec
    rounding = (
        f"whole blocks of {ws.block_size} tokens per layer"
        if ws.block_size > 1
        else "no block rounding"
    )
    kinds = {g.kind for g in spec.groups}
    exact = f"({_b(ws.sequence_bytes)})"
    if kinds <= {"full", "mla"} and not spec.state_groups:
        return f"{n:,} tokens x {format_bytes(spec.kv_bytes_per_token)}, {rounding} {exact}"
    if not spec.groups:
        return f"recurrent state only, the same at any length {exact}"
    held = [f"{_describe(g)} layers hold {g.resident_tokens(n):,}" for g in spec.groups]
    if spec.chunk_size and n > spec.chunk_size:
        held.append(f"peak when a chunk is full ({spec.chunk_size:,})")
    if spec.state_groups:
        held.append(f"+ state {format_bytes(spec.state_bytes_per_sequence)}")
    return f"{'; '.join(held)}; {rounding} {exact}"


def _engine_line(ws: Worksheet, engine: EngineView) -> list[str]:
    if engine.reserved_bytes_per_sequence in (0, ws.sequence_bytes):
        return []
    value = f"{format_bytes(engine.reserved_bytes_per_sequence)}/seq"
    note = (
        f"{engine.max_sequences} sequences: what vLLM reserves per request (not what is "
        f"resident), with --max-num-batched-tokens {engine.max_num_batched_tokens:,}"
    )
    lines = [_line(" ", "vLLM admission view", value, note)]
    lines += [_line(" ", "", "", f"  {n}") for n in engine.notes]
    lines.append(
        _line(
            " ", "", "", "  rules of the vLLM versions in kv-math.md; they change between releases"
        )
    )
    return lines


def _concurrency_lines(ws: Worksheet) -> list[str]:
    if ws.concurrency is None:
        return []
    need = ws.concurrency * ws.sequence_bytes
    if ws.max_sequences >= ws.concurrency:
        spare = ws.available_cache_bytes - need
        note = f"fits: needs {format_bytes(need)}, {format_bytes(spare)} to spare"
    else:
        note = (
            f"DOES NOT FIT: needs {format_bytes(need)}, short by "
            f"{format_bytes(ws.concurrency_shortfall_bytes)} (fits {ws.max_sequences})"
        )
    return [_line(" ", "target concurrency", f"{ws.concurrency} sequences", note)]


def _header(ws: Worksheet) -> list[str]:
    spec, arch = ws.spec, ws.arch
    tp = (
        f", tensor parallel {spec.tensor_parallel} (figures per GPU)"
        if spec.tensor_parallel > 1
        else ""
    )
    if arch.source is None:
        return [
            f"oomtrace budget: explicit architecture{tp}",
            f"model: {arch.num_layers} layers, {arch.family}",
            "",
        ]
    dtype = f"dtype {arch.dtype} ({arch.dtype_source})" if arch.dtype else "dtype not stated"
    return [
        f"oomtrace budget: {arch.name} ({arch.model_type}) from {arch.source}{tp}",
        f"model: {arch.describe_layers()}; {arch.family}; {dtype}",
        "",
    ]


def render_worksheet(ws: Worksheet, ledger: Ledger | None = None) -> str:
    """The worksheet as aligned text lines, then assumptions, then the ledger if any."""
    spec, w, r = ws.spec, ws.weights, ws.reserve
    tp = spec.tensor_parallel
    weights_note = w.basis + (f", / {tp} GPUs" if tp > 1 else "")
    available_note = "device - weights - reserve" + (
        " (NEGATIVE: nothing left for the cache)" if ws.available_cache_bytes < 0 else ""
    )
    n = ws.contract.stored_tokens
    cache = format_bytes(max(ws.available_cache_bytes, 0))
    bound = f"floor({cache} / {format_bytes(ws.sequence_bytes)})"
    lines = [
        *_header(ws),
        _line(" ", "device memory", format_bytes(ws.device_bytes), _b(ws.device_bytes)),
        _line("-", "weights", format_bytes(w.per_gpu_bytes), weights_note),
        _line("-", "runtime reserve", format_bytes(r.bytes), f"{r.kind}: {r.basis}"),
        _line(
            "=",
            "available for KV cache",
            format_bytes(ws.available_cache_bytes),
            f"{available_note} ({_b(ws.available_cache_bytes)})",
        ),
        *_kv_lines(ws),
        *_state_line(ws),
        _line(" ", "stored tokens / sequence", f"{n:,} tokens", ws.contract.describe()),
        _line(" ", "bytes per sequence", format_bytes(ws.sequence_bytes), _sequence_note(ws)),
        _line(" ", "concurrency bound", f"{ws.max_sequences} sequences", bound),
        *_concurrency_lines(ws),
        *_engine_line(ws, ws.engine),
    ]
    notes = ws.assumptions()
    if notes:
        lines += ["", "assumptions:", *(f"  - {note}" for note in notes)]
    if ledger is not None:
        lines += ["", *render_ledger(ledger)]
    return "\n".join(lines) + "\n"


def render_ledger(ledger: Ledger) -> list[str]:
    rows = ledger.rows
    lines = [f"admission ledger: {ledger.source} ({rows.height} requests)"]
    lines += [
        f"  left out: {gap.count} {'row' if gap.count == 1 else 'rows'}, {gap.reason} "
        f"(first: {escape.terminal(gap.example, EXAMPLE_WIDTH)})"
        for gap in ledger.gaps
    ]
    shown_rows = rows.head(LEDGER_ROWS_SHOWN)
    # ids are shown whole (they are what a user greps for): the column is as wide as the longest
    ids = [escape.terminal(i) for i in shown_rows["request_id"]]
    width = max([23, *map(len, ids)]) + 1
    lines.append(
        f"  {'request':<{width}}{'input':>10}{'new':>10}{'reserved':>12}{'bytes':>14}  admitted"
    )
    lines += [
        f"  {shown:<{width}}{row['input_tokens']:>10,}"
        f"{row['max_new_tokens']:>10,}{row['reserved_tokens']:>12,}"
        f"{format_bytes(row['reserved_bytes']):>14}  {'yes' if row['admitted'] else 'no'}"
        for shown, row in zip(ids, shown_rows.iter_rows(named=True), strict=True)
    ]
    if rows.height > LEDGER_ROWS_SHOWN:
        lines.append(
            f"  ... {rows.height - LEDGER_ROWS_SHOWN} more requests (all of them with --json)"
        )
    total, available = format_bytes(ledger.total_bytes), format_bytes(ledger.available_bytes)
    lines.append(
        f"  total reserved {total} of {available} available: "
        f"{format_bytes(ledger.remaining_bytes)} remains"
        + (
            " (OVER by " + format_bytes(-ledger.remaining_bytes) + ")"
            if ledger.remaining_bytes < 0
            else ""
        )
    )
    lines.append(f"  admitted together in file order: {ledger.admitted} of {rows.height}")
    never = ledger.never_fit
    if never.height:
        shown = ", ".join(
            f"{escape.terminal(i)} ({format_bytes(b)})"
            for i, b in zip(
                never["request_id"].head(10), never["reserved_bytes"].head(10), strict=True
            )
        )
        more = f" and {never.height - 10} more" if never.height > 10 else ""
        lines.append(f"  never fit alone: {never.height} ({shown}{more})")
    else:
        lines.append("  never fit alone: none")
    return lines
