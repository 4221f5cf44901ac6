// Command engine-loop runs a tiny engine loop on libkvblock: prefill, decode, prefix reuse, the
// out-of-blocks error, stats.
package main

import (
	"errors"
	"fmt"
	"log"

	"kvblock.example/kvblock"
)

func main() {
	version, err := kvblock.Version()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("libkvblock", version, "via", kvblock.LibraryPath)

	m, err := kvblock.NewManager(8, 16)
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()

	prompt := make([]int64, 40)
	for i := range prompt {
		prompt[i] = int64(100 + i)
	}
	cached, err := m.Allocate(1, prompt)
	if err != nil {
		log.Fatal(err)
	}
	if err := m.Commit(1, len(prompt)-cached); err != nil { // prefill
		log.Fatal(err)
	}
	for tok := int64(0); tok < 7; tok++ { // decode: one token per step
		if err := m.Append(1, tok); err != nil {
			log.Fatal(err)
		}
		if err := m.Commit(1, 1); err != nil {
			log.Fatal(err)
		}
	}
	table, err := m.BlockTable(1)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("seq 1 block table:", table)
	if err := m.Free(1); err != nil {
		log.Fatal(err)
	}

	// A second request with the same 32-token prefix reuses the committed blocks.
	cached, err = m.Allocate(2, append(append([]int64{}, prompt[:32]...), 7, 7, 7))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("seq 2 cached tokens:", cached)

	// The error path: a prompt larger than the pool gives an error matching kvblock.ErrOutOfBlocks.
	_, err = m.Allocate(3, make([]int64, 1000))
	if !errors.Is(err, kvblock.ErrOutOfBlocks) {
		log.Fatalf("expected ErrOutOfBlocks, got %v", err)
	}
	fmt.Println("expected error:", err)

	stats, err := m.Stats()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("stats: %+v\n", stats)
}
