// Shared by the shared-prefix (cascade) kernel tests: the configuration the CUDA tests sweep, and the
// block-table side of a batch whose sequences share leading blocks by group, with its
// kvb_prefix_groups description. The CUDA tests share the draw's structure and give their own numbers;
// cascade_attention.cpp draws its own sequences and shares the layout.
#pragma once
#include <algorithm>
#include <cstdlib>
#include <random>
#include <vector>

#include "kernels_util.h"

namespace kt {

// The CUDA cascade tests' sweep point.
struct CascadeConfig {
  uint32_t dtype, head_dim, block_size, num_kv_heads, group, window, sink;
  float soft_cap;
  unsigned seed;
  bool big;  // one large group (its size is the test's), so the shared keys split

  const char* name() const {
    static char buf[160];
    snprintf(buf, sizeof buf, "%s D%u bs%u hkv%u g%u win%u sink%u cap%g seed%u%s", dname(dtype), head_dim, block_size,
             num_kv_heads, group, window, sink, double(soft_cap), seed, big ? " big" : "");
    return buf;
  }
};

// KVB_TEST_QUICK (the GPU run's sanitizers) trims the sweep.
inline bool quick() { return kvbt_quick() != 0; }

// Counts elements [0, n) of got that are not close to want, reporting the first few.
inline int compare(const Tensor& got, const Tensor& want, size_t n, uint32_t dtype, const char* what,
                   const char* name) {
  int bad = 0;
  for (size_t i = 0; i < n; ++i)
    if (!close(got.get(i), want.get(i), dtype) && bad++ < 3)
      fprintf(stderr, "  %s %s: element %zu = %g, want %g\n", name, what, i, double(got.get(i)), double(want.get(i)));
  return bad;
}

// One sequence of a batch: in group `group` (-1: none), len tokens of which q_len are new; table starts
// as the group's shared blocks.
struct GroupedSeq {
  int32_t group, len, q_len;
  std::vector<int32_t> table;
};

struct SeqLens {
  int32_t len, q_len;
};

struct GroupedTables {
  uint32_t num_seqs = 0, max_blocks = 0;
  std::vector<int32_t> lens, tables, group_start{0}, members, shared_blocks;

  // The draw of the CUDA cascade tests: 1 to 3 groups (the second a group of one) of members sharing
  // leading blocks, then 1 to 3 sequences in no group (big: one group only), rows shuffled, over a
  // shuffled pool of num_blocks block ids. The test's functions draw the numbers, in this order:
  // shared_of() a group's shared blocks, size_of(g) its members, member(k, shared_tokens) and plain(k)
  // a sequence's lengths. Returns the sequences in row order.
  template <class SharedOf, class SizeOf, class Member, class Plain>
  std::vector<GroupedSeq> draw(std::mt19937& rng, uint32_t num_blocks, int32_t bs, bool big, SharedOf shared_of,
                               SizeOf size_of, Member member, Plain plain) {
    std::vector<int32_t> ids(num_blocks);
    for (uint32_t i = 0; i < num_blocks; ++i) ids[i] = int32_t(i);
    std::shuffle(ids.begin(), ids.end(), rng);
    size_t next = 0;
    std::vector<GroupedSeq> seqs;
    const int ngroups = big ? 1 : 1 + int(rng() % 3);
    std::vector<int32_t> nshared;
    for (int g = 0; g < ngroups; ++g) {
      const int32_t nb = shared_of();
      std::vector<int32_t> head;
      for (int32_t k = 0; k < nb; ++k) head.push_back(ids.at(next++));
      nshared.push_back(nb);
      const int nm = size_of(g);
      for (int k = 0; k < nm; ++k) {
        const SeqLens l = member(k, nb * bs);
        seqs.push_back(GroupedSeq{g, l.len, l.q_len, head});
      }
    }
    const int nplain = big ? 0 : 1 + int(rng() % 3);
    for (int k = 0; k < nplain; ++k) {
      const SeqLens l = plain(k);
      seqs.push_back(GroupedSeq{-1, l.len, l.q_len, {}});
    }
    std::shuffle(seqs.begin(), seqs.end(), rng);
    lay_out(seqs, ids, next, bs);
    describe_groups(seqs, nshared);
    return seqs;
  }

  // Completes each sequence's table from ids[next...] (bs tokens a block), then fills lens and tables.
  void lay_out(std::vector<GroupedSeq>& seqs, const std::vector<int32_t>& ids, size_t next, int32_t bs) {
    num_seqs = uint32_t(seqs.size());
    for (GroupedSeq& s : seqs) {
      while (int32_t(s.table.size()) * bs < s.len) s.table.push_back(ids.at(next++));
      max_blocks = std::max(max_blocks, uint32_t(s.table.size()));
    }
    tables.assign(size_t(num_seqs) * max_blocks, -1);
    for (uint32_t i = 0; i < num_seqs; ++i) {
      lens.push_back(seqs[i].len);
      for (size_t b = 0; b < seqs[i].table.size(); ++b) tables[i * max_blocks + b] = seqs[i].table[b];
    }
  }

  // The description: group g holds the rows whose sequence is in g, sharing nshared[g] blocks.
  void describe_groups(const std::vector<GroupedSeq>& seqs, const std::vector<int32_t>& nshared) {
    for (size_t g = 0; g < nshared.size(); ++g) {
      for (uint32_t i = 0; i < uint32_t(seqs.size()); ++i)
        if (seqs[i].group == int32_t(g)) members.push_back(int32_t(i));
      group_start.push_back(int32_t(members.size()));
      shared_blocks.push_back(nshared[g]);
    }
  }

  // policy ALWAYS: the shared-prefix kernels run every group, whatever their cost model expects
  // (tests/cpp/cascade_cost.cpp tests the model and the AUTO path).
  kvb_prefix_groups groups() {
    kvb_prefix_groups g;
    kvb_prefix_groups_init(&g);
    g.policy = KVB_PREFIX_GROUPS_ALWAYS;
    g.group_start = group_start.data();
    g.members = members.data();
    g.shared_blocks = shared_blocks.data();
    g.num_groups = uint32_t(shared_blocks.size());
    g.num_members = uint32_t(members.size());
    return g;
  }
};

}  // namespace kt
