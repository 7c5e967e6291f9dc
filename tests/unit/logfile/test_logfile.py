"""The log block format, the damage-tolerant scan, the writer, and the block-selection rules:
the statistics rule and HUDI-6758's sequence rule with the seed's scenarios 1-4."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from _hypothesis_profiles import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from lakewarden.logfile import (
    ATTEMPT_ID,
    BLOCK_SEQUENCE_NO,
    INSTANT_TIME,
    BlockType,
    CommittedBlocks,
    LogScan,
    LogWriter,
    MissingCommittedBlockError,
    encode_block,
    encode_records,
    scan_backward,
    scan_log,
    select_by_sequence,
    select_committed,
)
from lakewarden.storage import AlreadyExistsError
from lakewarden.storage.local import LocalStorage

I1, I2 = "20260101000000001", "20260101000000002"


def block(
    instant: str | None = I1,
    attempt: str | None = "a0",
    seq: int | None = 0,
    values: list[int] | None = None,
    block_type: BlockType = BlockType.DATA,
) -> bytes:
    header = {}
    if instant is not None:
        header[INSTANT_TIME] = instant
    if attempt is not None:
        header[ATTEMPT_ID] = attempt
    if seq is not None:
        header[BLOCK_SEQUENCE_NO] = str(seq)
    content = encode_records(pa.table({"v": pa.array(values or [seq or 0], pa.int64())}))
    return encode_block(block_type, header, content)


def values(blocks: list[object]) -> list[int]:
    out: list[int] = []
    for b in blocks:
        out.extend(b.records().column("v").to_pylist())  # type: ignore[attr-defined]
    return out


# -- format and scan ------------------------------------------------------------------------


def test_blocks_round_trip_in_order_with_headers_and_records() -> None:
    data = block(seq=0, values=[1, 2]) + block(seq=1, values=[3]) + block(seq=2, values=[4])
    scan = scan_log(data, "f")
    assert scan.corrupt == []
    assert [(b.instant, b.attempt, b.sequence_no) for b in scan.blocks] == [
        (I1, "a0", 0),
        (I1, "a0", 1),
        (I1, "a0", 2),
    ]
    assert values(scan.blocks) == [1, 2, 3, 4]
    assert scan.blocks[1].offset == len(block(seq=0, values=[1, 2]))


def test_a_torn_last_block_is_reported_and_the_blocks_before_it_are_read() -> None:
    good = block(seq=0) + block(seq=1)
    torn = block(seq=2)[:-7]
    scan = scan_log(good + torn, "f")
    assert [b.sequence_no for b in scan.blocks] == [0, 1]
    assert len(scan.corrupt) == 1
    assert scan.corrupt[0].offset == len(good) and scan.corrupt[0].length == len(torn)
    assert scan.corrupt[0].reason.startswith("torn")


def test_a_corrupt_block_in_the_middle_never_hides_the_blocks_after_it() -> None:
    first, second, third = block(seq=0), bytearray(block(seq=1)), block(seq=2)
    second[len(second) // 2] ^= 0xFF
    scan = scan_log(first + bytes(second) + third, "f")
    assert [b.sequence_no for b in scan.blocks] == [0, 2]
    assert [(r.offset, r.length, r.reason) for r in scan.corrupt] == [
        (len(first), len(second), "CRC32 mismatch")
    ]


def test_garbage_and_an_empty_file_never_raise() -> None:
    assert scan_log(b"", "f").blocks == []
    scan = scan_log(b"not a log file at all" + block(seq=0), "f")
    assert [b.sequence_no for b in scan.blocks] == [0]
    assert scan.corrupt[0].offset == 0 and scan.corrupt[0].reason == "no block magic"


def test_backward_scan_follows_trailing_lengths_and_stops_at_damage() -> None:
    data = block(seq=0) + block(seq=1) + block(seq=2)
    assert [b.sequence_no for b in scan_backward(data)] == [2, 1, 0]
    assert list(scan_backward(data + b"xx")) == []


@settings(max_examples=examples(40), deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(list(BlockType)),
            st.dictionaries(st.text(max_size=8), st.text(max_size=12), max_size=4),
            st.lists(st.integers(-(2**63), 2**63 - 1), max_size=20),
        ),
        max_size=6,
    ),
    st.data(),
)
def test_property_any_blocks_round_trip_and_damage_only_loses_the_blocks_it_touches(
    specs: list[tuple[BlockType, dict[str, str], list[int]]], data: st.DataObject
) -> None:
    encoded = [
        encode_block(t, h, encode_records(pa.table({"v": pa.array(v, pa.int64())})))
        for t, h, v in specs
    ]
    whole = b"".join(encoded)
    scan = scan_log(whole)
    assert scan.corrupt == []
    assert [(b.block_type, b.header) for b in scan.blocks] == [(t, h) for t, h, _ in specs]
    assert [b.records().column("v").to_pylist() for b in scan.blocks] == [v for *_, v in specs]
    if not whole:
        return
    # One damaged byte: every block that does not contain it is still found, intact.
    at = data.draw(st.integers(0, len(whole) - 1))
    damaged = bytearray(whole)
    damaged[at] ^= data.draw(st.integers(1, 255))
    starts = [sum(len(e) for e in encoded[:i]) for i in range(len(encoded))]
    untouched = {s for s, e in zip(starts, encoded, strict=True) if not s <= at < s + len(e)}
    found = scan_log(bytes(damaged))
    assert {b.offset for b in found.blocks} >= untouched
    assert sum(r.length for r in found.corrupt) + sum(b.length for b in found.blocks) == len(whole)
    # A truncated file: every whole block before the cut is found.
    cut = data.draw(st.integers(0, len(whole)))
    truncated = scan_log(whole[:cut])
    assert {b.offset for b in truncated.blocks} == {
        s for s, e in zip(starts, encoded, strict=True) if s + len(e) <= cut
    }


# -- writer ---------------------------------------------------------------------------------


def test_writer_numbers_blocks_per_attempt_and_never_overwrites(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path)
    key = "p/.f_20260101000000000.log.1_0-0-0"
    for attempt in ("a0", "a1"):
        writer = LogWriter(storage, key, instant=I1, attempt=attempt, append=False)
        writer.add_data(pa.table({"v": [1]}))
        writer.add_delete(pa.table({"v": [2]}))
        writer.add_command("rollback")
        if attempt == "a0":
            result = writer.flush()
            assert (result.block_count, result.created) == (3, True)
            assert result.size_bytes == len(storage.read(key))
        else:
            with pytest.raises(AlreadyExistsError):
                writer.flush()  # no append: an attempt never overwrites another's file
    scan = scan_log(storage.read(key), key)
    assert [(b.block_type, b.sequence_no) for b in scan.blocks] == [
        (BlockType.DATA, 0),
        (BlockType.DELETE, 1),
        (BlockType.COMMAND, 2),
    ]


def test_writer_appends_a_retry_after_the_first_attempt(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path)
    key = "p/.f_20260101000000000.log.1_0-0-0"
    created = []
    for attempt in ("a0", "a1"):
        writer = LogWriter(storage, key, instant=I1, attempt=attempt, append=True)
        writer.add_data(pa.table({"v": [1]}))
        created.append(writer.flush().created)
    assert created == [True, False]
    scan = scan_log(storage.read(key), key)
    assert [(b.attempt, b.sequence_no) for b in scan.blocks] == [("a0", 0), ("a1", 0)]


# -- the statistics rule --------------------------------------------------------------------


def committed(path: str, attempt: str, count: int, instant: str = I1) -> CommittedBlocks:
    return CommittedBlocks(path=path, instant=instant, attempt=attempt, block_count=count)


def test_statistics_take_exactly_the_committed_attempt_whatever_the_others_wrote() -> None:
    # apache/hudi#10803: the attempt Spark accepted (a1) wrote 2 blocks; a speculative attempt
    # (a2) wrote 3, and a zombie of a failed one (a0) appended after the commit.
    data = (
        block(attempt="a1", seq=0, values=[10])
        + block(attempt="a2", seq=0, values=[20])
        + block(attempt="a1", seq=1, values=[11])
        + block(attempt="a2", seq=1, values=[21])
        + block(attempt="a2", seq=2, values=[22])
        + block(attempt="a0", seq=0, values=[30])
    )
    scan = scan_log(data, "f")
    chosen = select_committed([scan], [committed("f", "a1", 2)])
    assert values(chosen.blocks) == [10, 11]
    assert len(chosen.skipped) == 4
    # The HUDI-6758 rule on the same file keeps the longest sequence: the wrong attempt.
    assert values(select_by_sequence([scan], [I1]).blocks) == [20, 21, 22]


def test_statistics_skip_duplicated_bytes_and_blocks_of_uncompleted_instants() -> None:
    once = block(attempt="a1", seq=0, values=[1]) + block(attempt="a1", seq=1, values=[2])
    later = block(instant=I2, attempt="b0", seq=0, values=[9])  # I2 never completed
    scan = scan_log(once + once + later, "f")
    chosen = select_committed([scan], [committed("f", "a1", 2)])
    assert values(chosen.blocks) == [1, 2]
    reasons = sorted(s.reason for s in chosen.skipped)
    assert reasons[0] == "a duplicate or a block past the committed count"
    assert reasons[-1].startswith(f"instant {I2} has no completed statistics")


def test_statistics_span_instants_in_completion_order_across_files() -> None:
    f1 = scan_log(block(attempt="a", seq=0, values=[1]), "f1")
    f2 = scan_log(
        block(instant=I2, attempt="b", seq=0, values=[2])
        + block(instant=I2, attempt="b", seq=1, values=[3]),
        "f2",
    )
    chosen = select_committed([f1, f2], [committed("f1", "a", 1), committed("f2", "b", 2, I2)])
    assert values(chosen.blocks) == [1, 2, 3]


def test_a_committed_block_that_is_damaged_is_a_named_error_not_a_silent_drop() -> None:
    good = block(attempt="a1", seq=0)
    torn = block(attempt="a1", seq=1)[:-3]
    scan = scan_log(good + torn, "f")
    with pytest.raises(MissingCommittedBlockError) as info:
        select_committed([scan], [committed("f", "a1", 2)])
    assert info.value.missing == [1] and info.value.path == "f"
    assert "1 damaged region(s)" in str(info.value)


# -- HUDI-6758's sequence rule: the seed's scenarios ---------------------------------------


def files(*blocks_per_file: list[bytes]) -> list[LogScan]:
    return [scan_log(b"".join(bs), f"lf{i + 1}") for i, bs in enumerate(blocks_per_file)]


def chosen_files(scans: list[LogScan]) -> list[str]:
    return [b.path for b in select_by_sequence(scans, [I1]).blocks]


def test_scenario_1_happy_path_keeps_the_one_sequence() -> None:
    scans = files([block(attempt=None, seq=0)], [block(attempt=None, seq=1)])
    assert chosen_files(scans) == ["lf1", "lf2"]


def test_scenario_2_retry_with_a_longer_sequence_wins() -> None:
    scans = files(
        [block(attempt=None, seq=0)],
        [block(attempt=None, seq=1)],
        [block(attempt=None, seq=0)],
        [block(attempt=None, seq=1)],
        [block(attempt=None, seq=2)],
    )
    assert chosen_files(scans) == ["lf3", "lf4", "lf5"]


def test_scenario_3_equal_sequences_the_latest_wins() -> None:
    scans = files(
        [block(attempt="x", seq=0)],
        [block(attempt="x", seq=1)],
        [block(attempt="y", seq=0)],
        [block(attempt="y", seq=1)],
    )
    assert chosen_files(scans) == ["lf3", "lf4"]


def test_scenario_3_with_a_corrupt_block_the_intact_sequence_wins() -> None:
    corrupt = bytearray(block(attempt=None, seq=1))
    corrupt[20] ^= 0x01
    scans = files(
        [block(attempt=None, seq=0, values=[1]), bytes(corrupt), block(attempt=None, seq=0)],
        [block(attempt=None, seq=1, values=[4])],
    )
    chosen = select_by_sequence(scans, [I1])
    assert [(b.path, b.offset > 0) for b in chosen.blocks] == [("lf1", True), ("lf2", False)]
    assert len(chosen.corrupt) == 1


def test_scenario_4_a_shorter_retry_loses() -> None:
    scans = files(
        [block(attempt=None, seq=0)], [block(attempt=None, seq=1)], [block(attempt=None, seq=0)]
    )
    assert chosen_files(scans) == ["lf1", "lf2"]


def test_without_sequence_numbers_every_block_is_kept() -> None:
    scans = files([block(attempt=None, seq=None), block(attempt=None, seq=None)])
    assert len(select_by_sequence(scans, [I1]).blocks) == 2
