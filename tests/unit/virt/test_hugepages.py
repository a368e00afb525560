"""``[DEFAULT] reserved_huge_pages``: the parser and the check against the
host's NUMA cells, as tables (no host, no mocks)."""

import pytest

from rtagent.virt import errors, hugepages
from rtagent.virt.host import NumaCell

GIB_KB = 1024 * 1024


@pytest.mark.parametrize(
    ("entries", "expected"),
    [
        (None, ()),
        ([], ()),
        (["", "  "], ()),  # blank values reserve nothing
        (["node:0,size:2048,count:64"], ((0, 2048, 64),)),
        # nova's example: KiB, and a size with a unit
        (
            ["node:0,size:2048,count:64", "node:1,size:1GB,count:1"],
            ((0, 2048, 64), (1, GIB_KB, 1)),
        ),
        # sorted by cell, then size, whatever the order given
        (
            ["node:1,size:2MB,count:2", "node:0,size:1G,count:1", "node:0,size:2048,count:3"],
            ((0, 2048, 3), (0, GIB_KB, 1), (1, 2048, 2)),
        ),
        # every unit, any case, binary; fields in any order; spaces ignored
        (["size:2048K,node:0,count:1"], ((0, 2048, 1),)),
        (["node:0,size:2048kb,count:1"], ((0, 2048, 1),)),
        (["node:0,size:2048KiB,count:1"], ((0, 2048, 1),)),
        (["node:0,size:2m,count:1"], ((0, 2048, 1),)),
        (["node:0,size:2MiB,count:1"], ((0, 2048, 1),)),
        (["node:0,size:1gib,count:1"], ((0, GIB_KB, 1),)),
        ([" node : 0 , size : 2 MB , count : 0 "], ((0, 2048, 0),)),
        (["node:0,size:4,count:10"], ((0, 4, 10),)),  # the base page size too
    ],
)
def test_parse(entries, expected):
    assert hugepages.parse(entries) == expected


@pytest.mark.parametrize(
    ("entry", "field", "reason"),
    [
        ("node:0,size:2048", "count", "missing"),
        ("size:2048,count:1", "node", "missing"),
        ("node:0,count:1", "size", "missing"),
        ("node:0,node:1,size:2048,count:1", "node", "given twice"),
        ("node:0,size:2048,count:1,colour:red", "colour", "unknown field"),
        ("Node:0,size:2048,count:1", "Node", "unknown field"),
        ("node0,size:2048,count:1", "node0", "not field:value"),
        ("node:,size:2048,count:1", "node:", "not field:value"),
        ("node:0,,size:2048,count:1", "entry", "not field:value"),
        ("node:x,size:2048,count:1", "node", "'x' is not an integer from 0 to"),
        ("node:-1,size:2048,count:1", "node", "'-1' is not an integer from 0 to"),
        ("node:0,size:2048,count:1.5", "count", "'1.5' is not an integer from 0 to"),
        ("node:0,size:2048,count:\u00b2", "count", "is not an integer from 0 to"),
        ("node:0,size:0,count:1", "size", "'0' is not a page size"),
        ("node:0,size:2TB,count:1", "size", "'2TB' is not a page size"),
        ("node:0,size:1.5GB,count:1", "size", "'1.5GB' is not a page size"),
        ("node:0,size:2Mi,count:1", "size", "'2Mi' is not a page size"),
        ("node:0,size:MB,count:1", "size", "'MB' is not a page size"),
    ],
)
def test_parse_errors_name_the_entry_and_the_field(entry, field, reason):
    with pytest.raises(errors.InvalidReservedHugePages) as info:
        hugepages.parse(["node:9,size:4,count:1", entry])
    exc = info.value
    assert exc.code == "virt.invalid_reserved_huge_pages"
    assert (exc.kwargs["entry"], exc.kwargs["field"]) == (entry, field)
    assert str(exc).startswith(f"[DEFAULT] reserved_huge_pages = {entry!r}: {field}: ")
    assert reason in str(exc)


def test_one_page_size_of_one_cell_reserved_twice_is_refused():
    # nova keeps the last; a repeated line is a mistake, said at start-up.
    with pytest.raises(errors.InvalidReservedHugePages) as info:
        hugepages.parse(["node:0,size:2048,count:1", "node:0,size:2MB,count:2"])
    assert str(info.value) == (
        "[DEFAULT] reserved_huge_pages = 'node:0,size:2MB,count:2': size: cell 0's 2048 KiB "
        "pages are already reserved by 'node:0,size:2048,count:1'"
    )


# Two cells: cell 0 with 2 MiB and 1 GiB pages, cell 1 with 2 MiB pages only.
CELLS = (
    NumaCell(0, 4096, (), pages=((4, 1000), (2048, 512), (GIB_KB, 2))),
    NumaCell(1, 4096, (), pages=((4, 1000), (2048, 128))),
)


@pytest.mark.parametrize(
    "reserved",
    [
        (),
        ((0, 2048, 512), (0, GIB_KB, 2), (1, 2048, 128)),  # every page of each
        ((1, 2048, 0),),
        ((0, 4, 100),),
    ],
)
def test_check_accepts_what_the_cells_have(reserved):
    assert hugepages.check(reserved, CELLS) == reserved


@pytest.mark.parametrize(
    ("reserved", "cells", "message"),
    [
        (
            ((2, 2048, 1),),
            CELLS,
            "'node:2,size:2048,count:1': node: 2 is not a NUMA cell of this host (cells: 0, 1)",
        ),
        (
            ((0, 2048, 1),),
            (),
            "'node:0,size:2048,count:1': node: 0 is not a NUMA cell of this host (cells: none)",
        ),
        (
            ((1, GIB_KB, 1),),
            CELLS,
            "'node:1,size:1048576,count:1': size: 1048576 KiB is not a page size of cell 1 "
            "(KiB: 4, 2048)",
        ),
        (
            ((0, 2048, 1),),
            (NumaCell(0, 4096, ()),),
            "'node:0,size:2048,count:1': size: 2048 KiB is not a page size of cell 0 (KiB: none)",
        ),
        (
            ((0, 2048, 1), (1, 2048, 129)),
            CELLS,
            "'node:1,size:2048,count:129': count: 129 is more than cell 1's 128 pages of 2048 KiB",
        ),
    ],
)
def test_check_refuses_what_the_cells_do_not_have(reserved, cells, message):
    with pytest.raises(errors.InvalidReservedHugePages) as info:
        hugepages.check(reserved, cells)
    assert str(info.value) == f"[DEFAULT] reserved_huge_pages = {message}"
