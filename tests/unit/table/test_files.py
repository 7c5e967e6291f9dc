"""File ids, write tokens, base and log file names: render/parse round trips and bad names."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lakewarden.table.files import (
    BaseFileName,
    LogFileName,
    MalformedFileNameError,
    WriteToken,
    bucket_file_id,
    check_file_id,
    file_key,
    is_log_file,
    new_file_id,
    split_key,
    written_by,
)

file_ids = st.one_of(
    st.integers(0, 10**8 - 1).map(bucket_file_id),
    st.uuids(version=4).map(str),
    st.text("abcdefXYZ0123456789-", min_size=1, max_size=40),
)
tokens = st.builds(WriteToken, st.integers(0, 10**6), st.integers(0, 10**6), st.integers(0, 99))
instants = st.integers(10**16, 10**17 - 1).map(str)


@given(file_ids, tokens, instants)
def test_base_file_name_round_trips(file_id: str, token: WriteToken, instant: str) -> None:
    name = BaseFileName(file_id, token, instant)
    rendered = name.render()
    assert rendered == f"{file_id}_{token}_{instant}.parquet"
    assert BaseFileName.parse(rendered) == name
    assert not is_log_file(rendered)


@given(file_ids, instants, st.integers(1, 10**6), tokens)
def test_log_file_name_round_trips(
    file_id: str, instant: str, version: int, token: WriteToken
) -> None:
    name = LogFileName(file_id, instant, version, token)
    rendered = name.render()
    assert rendered == f".{file_id}_{instant}.log.{version}_{token}"
    assert LogFileName.parse(rendered) == name
    assert is_log_file(rendered)


@given(file_ids, instants, st.integers(1, 10**6), tokens, instants)
def test_a_log_file_name_naming_its_instant_round_trips(
    file_id: str, base_instant: str, version: int, token: WriteToken, instant: str
) -> None:
    name = LogFileName(file_id, base_instant, version, token, instant)
    rendered = name.render()
    assert rendered == f".{file_id}_{base_instant}.log.{version}_{token}_{instant}"
    assert LogFileName.parse(rendered) == name and is_log_file(rendered)
    assert written_by(rendered) == instant
    assert written_by(LogFileName(file_id, base_instant, version, token).render()) is None
    assert written_by(BaseFileName(file_id, token, instant).render()) == instant


@given(tokens)
def test_write_token_round_trips(token: WriteToken) -> None:
    assert WriteToken.parse(str(token)) == token


def test_examples_match_the_architecture() -> None:
    base = BaseFileName(bucket_file_id(3), WriteToken(0, 1, 2), "20240102030405678")
    assert file_key("region=eu", base.render()) == (
        "region=eu/00000003-0000_0-1-2_20240102030405678.parquet"
    )
    log = LogFileName("00000003-0000", "20240102030405678", 1, WriteToken(5, 0, 1))
    assert log.render() == ".00000003-0000_20240102030405678.log.1_5-0-1"
    assert split_key("a=1/b=2/f.parquet") == ("a=1/b=2", "f.parquet")
    assert split_key("f.parquet") == ("", "f.parquet")
    assert file_key("", "f.parquet") == "f.parquet"


def test_bucket_file_ids_are_deterministic_and_bulk_ids_are_fresh() -> None:
    assert bucket_file_id(0) == "00000000-0000"
    assert bucket_file_id(12345) == "00012345-0000"
    assert new_file_id() != new_file_id()
    check_file_id(new_file_id())
    with pytest.raises(ValueError, match="bucket must be >= 0"):
        bucket_file_id(-1)


@pytest.mark.parametrize(
    "name",
    [
        "",
        "abc.parquet",
        "fid_0-0-0_2024010203040567.parquet",  # 16-digit instant
        "fid_0-0_20240102030405678.parquet",  # token with two parts
        "fid_00-0-0_20240102030405678.parquet",  # leading zero does not round-trip
        "f_id_0-0-0_20240102030405678.parquet",
        "fid_0-0-0_20240102030405678.parquet.tmp",
        ".fid_20240102030405678.log.1_0-0-0",  # a log file is not a base file
    ],
)
def test_malformed_base_names_are_rejected(name: str) -> None:
    with pytest.raises(MalformedFileNameError, match="is not a base file name"):
        BaseFileName.parse(name)


@pytest.mark.parametrize(
    "name",
    [
        "fid_20240102030405678.log.1_0-0-0",  # no leading dot
        ".fid_20240102030405678.log.0_0-0-0",  # versions count from 1
        ".fid_20240102030405678.log._0-0-0",
        ".fid_2024.log.1_0-0-0",
        ".fid_20240102030405678.log.1_0-0",
        "fid_0-0-0_20240102030405678.parquet",
    ],
)
def test_malformed_log_names_are_rejected(name: str) -> None:
    with pytest.raises(MalformedFileNameError, match="is not a log file name"):
        LogFileName.parse(name)


def test_components_are_validated_when_rendering() -> None:
    with pytest.raises(MalformedFileNameError, match="file id 'a_b'"):
        BaseFileName("a_b", WriteToken(0, 0, 0), "20240102030405678")
    with pytest.raises(MalformedFileNameError, match="not a 17-digit instant"):
        BaseFileName("a", WriteToken(0, 0, 0), "2024")
    with pytest.raises(MalformedFileNameError, match="version must be >= 1"):
        LogFileName("a", "20240102030405678", 0, WriteToken(0, 0, 0))
    with pytest.raises(MalformedFileNameError, match="write token parts must be >= 0"):
        WriteToken(0, -1, 0)
    with pytest.raises(MalformedFileNameError, match="is not '<taskPartition>"):
        WriteToken.parse("1-2")
