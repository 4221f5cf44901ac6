"""A tiny engine loop on libkvblock: prefill, decode, prefix reuse, out-of-blocks, stats."""
import array

import kvblock

BLOCK = 16


def main():
    print("libkvblock", kvblock.version(), "via", kvblock.LIBRARY_PATH)
    with kvblock.Manager(num_blocks=8, block_size=BLOCK) as m:
        prompt = array.array("q", range(100, 140))  # 40 tokens, passed without a copy
        cached = m.allocate(1, prompt)
        m.commit(1, len(prompt) - cached)  # "prefill": K/V of every uncached token written
        for token in range(7):  # decode: one token per step
            m.append(1, [token])
            m.commit(1, 1)
        print("seq 1 block table:", m.block_table(1))
        m.free(1)

        # A second request with the same 32-token prefix reuses the committed blocks.
        cached = m.allocate(2, list(prompt[:32]) + [7, 7, 7])
        print("seq 2 cached tokens:", cached)

        # The error path: a prompt larger than the pool is refused with one exception type.
        try:
            m.allocate(3, range(1000))
        except kvblock.KvbError as e:
            print("expected error:", e.name, "-", e.message)
        print("stats:", {k: v for k, v in m.stats().items() if v})


if __name__ == "__main__":
    main()
