package kvblock_test

import (
	"errors"
	"strings"
	"sync"
	"testing"

	"kvblock.example/kvblock"
)

const block = 16

func seq(from, n int) []int64 {
	t := make([]int64, n)
	for i := range t {
		t[i] = int64(from + i)
	}
	return t
}

func newManager(t *testing.T, numBlocks uint32) *kvblock.Manager {
	t.Helper()
	m, err := kvblock.NewManager(numBlocks, block)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.CheckInvariants(); err != nil {
			t.Error(err)
		}
		m.Close()
	})
	return m
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestEngineLoop(t *testing.T) {
	m := newManager(t, 8)
	prompt := seq(1000, 40) // 2 full blocks + 8 tokens
	cached, ok, err := m.CanAllocate(prompt)
	if err != nil || !ok || cached != 0 {
		t.Fatalf("CanAllocate = %d, %v, %v", cached, ok, err)
	}
	if cached, err = m.Allocate(1, prompt); err != nil || cached != 0 {
		t.Fatalf("Allocate = %d, %v", cached, err)
	}
	must(t, m.Commit(1, len(prompt)))
	for tok := int64(0); tok < 30; tok++ {
		if ok, err := m.CanAppend(1, 1); !ok || err != nil {
			t.Fatalf("CanAppend = %v, %v", ok, err)
		}
		must(t, m.Append(1, tok))
		must(t, m.Commit(1, 1))
	}
	table, err := m.BlockTable(1)
	must(t, err)
	if len(table) != 5 {
		t.Fatalf("block table %v, want 5 blocks", table)
	}
	if free, _ := m.NumFreeBlocks(); free != 3 {
		t.Fatalf("free blocks %d, want 3", free)
	}

	second := append(append([]int64{}, prompt[:32]...), 5, 6, 7)
	if cached, err = m.Allocate(2, second); err != nil || cached != 32 {
		t.Fatalf("second Allocate = %d, %v; want 32 cached tokens", cached, err)
	}
	table2, err := m.BlockTable(2)
	must(t, err)
	if table2[0] != table[0] || table2[1] != table[1] {
		t.Fatalf("shared prefix blocks differ: %v vs %v", table2, table)
	}
	must(t, m.Commit(2, len(second)-32))

	must(t, m.Free(1))
	must(t, m.Free(2))
	s, err := m.Stats()
	must(t, err)
	if s.NumSeqs != 0 || s.UsedBlocks != 0 || s.FreeBlocks != 8 || s.HitTokens != 32 || s.CachedFree < 2 {
		t.Fatalf("stats %+v", s)
	}
	if s.QueryTokens != uint64(len(prompt)+len(second)) {
		t.Fatalf("query tokens %d", s.QueryTokens)
	}
}

func TestOutOfBlocks(t *testing.T) {
	m := newManager(t, 8)
	must(t, func() error { _, err := m.Allocate(1, seq(0, 6*block)); return err }())
	must(t, m.Commit(1, 6*block))
	if _, ok, err := m.CanAllocate(seq(5000, 3*block)); ok || err != nil {
		t.Fatalf("CanAllocate = %v, %v; want false, nil", ok, err)
	}
	_, err := m.Allocate(2, seq(5000, 3*block))
	var kerr *kvblock.Error
	if !errors.As(err, &kerr) || kerr.Status != kvblock.ErrOutOfBlocks || kerr.Message == "" {
		t.Fatalf("Allocate error = %v; want ErrOutOfBlocks with a message", err)
	}
	if free, _ := m.NumFreeBlocks(); free != 2 {
		t.Fatalf("a failed call changed the pool: %d free", free)
	}
	appended := 0
	for {
		ok, err := m.CanAppend(1, 1)
		must(t, err)
		if !ok {
			break
		}
		must(t, m.Append(1, int64(appended)))
		must(t, m.Commit(1, 1))
		appended++
	}
	if appended != 2*block {
		t.Fatalf("appended %d tokens, want %d", appended, 2*block)
	}
	if err := m.Append(1, 0); !errors.Is(err, kvblock.ErrOutOfBlocks) {
		t.Fatalf("Append error = %v; want ErrOutOfBlocks", err)
	}
}

func TestErrorPath(t *testing.T) {
	m := newManager(t, 8)
	err := m.Commit(42, 1)
	if !errors.Is(err, kvblock.ErrNoSuchSequence) || !strings.Contains(err.Error(), "42") {
		t.Fatalf("Commit error = %v", err)
	}
	if !strings.HasPrefix(err.Error(), "KVB_ERR_NO_SUCH_SEQUENCE: ") {
		t.Fatalf("error text %q", err)
	}
	_, err = m.Allocate(7, []int64{1, 2, 3})
	must(t, err)
	if _, err = m.Allocate(7, []int64{1, 2, 3}); !errors.Is(err, kvblock.ErrSequenceExists) {
		t.Fatalf("second Allocate error = %v", err)
	}
	if _, err := kvblock.NewManager(0, block); !errors.Is(err, kvblock.ErrInvalidArgument) {
		t.Fatalf("NewManager(0) error = %v", err)
	}
	closed, err := kvblock.NewManager(4, block)
	must(t, err)
	closed.Close()
	if err := closed.Free(1); !errors.Is(err, kvblock.ErrInvalidArgument) {
		t.Fatalf("call on a closed manager = %v", err)
	}
}

func TestConcurrentUse(t *testing.T) {
	m := newManager(t, 64)
	var wg sync.WaitGroup
	for id := int64(0); id < 4; id++ {
		wg.Add(1)
		go func(id int64) {
			defer wg.Done()
			tokens := seq(0, 40)
			cached, err := m.Allocate(id, tokens)
			if err == nil {
				err = m.Commit(id, len(tokens)-cached)
			}
			if err != nil {
				t.Error(err)
			}
		}(id)
	}
	wg.Wait()
	if s, _ := m.Stats(); s.NumSeqs != 4 {
		t.Fatalf("%d sequences, want 4", s.NumSeqs)
	}
}
