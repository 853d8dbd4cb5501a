"""The caching allocator's block and segment sizes, worked by hand from
c10/cuda/CUDACachingAllocator.cpp (round_size, get_allocation_size; kMinBlockSize 512,
kSmallSize 1 MiB, kSmallBuffer 2 MiB, kMinLargeAlloc 10 MiB, kLargeBuffer 20 MiB, kRoundLarge 2 MiB)."""

import pytest

from prism_strategy.estimate.memory_runtime import block_bytes, segment_bytes

MiB = 1 << 20


@pytest.mark.parametrize(("request_bytes", "block"), [(1, 512), (512, 512), (513, 1024), (4097, 4608)])
def test_requests_round_up_to_512_byte_blocks(request_bytes, block):
    assert block_bytes(request_bytes) == block


@pytest.mark.parametrize(
    ("request_bytes", "segment"),
    [
        (4, 2 * MiB),  # small pool: a 2 MiB segment
        (1 * MiB, 2 * MiB),  # kSmallSize itself is still small
        (1 * MiB + 1, 20 * MiB),  # 1..10 MiB: a 20 MiB kLargeBuffer segment
        (10 * MiB - 512, 20 * MiB),
        (10 * MiB, 10 * MiB),  # from kMinLargeAlloc on: rounded to 2 MiB
        (10 * MiB + 1, 12 * MiB),
        (4096 * 2048 * 2 + 3, 18 * MiB),  # bf16 [4096, 2048] + 3 bytes: 16 MiB + 512 -> 18 MiB
    ],
)
def test_segments_follow_get_allocation_size(request_bytes, segment):
    assert segment_bytes(request_bytes) == segment
