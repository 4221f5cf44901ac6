// Validation and grouping of kvb_copy_slots pairs. Every pair reads its source as it was before the
// call; pairs are linked when one reads the slot another writes (destinations are distinct, so a slot
// has one writer), and each linked group is copied as a unit that reads all its sources before it
// writes (copy_slots.h).
#include <algorithm>
#include <numeric>

#include "../../libkvblock/error.h"
#include "copy_slots.h"

namespace kvb {
namespace kern {

namespace {

int64_t find_root(std::vector<int64_t>& parent, int64_t i) {
  while (parent[size_t(i)] != i) {
    parent[size_t(i)] = parent[size_t(parent[size_t(i)])];
    i = parent[size_t(i)];
  }
  return i;
}

}  // namespace

SlotCopy plan_slot_copy(const int64_t* pairs, size_t num_pairs, int64_t num_slots) {
  const int64_t n = int64_t(num_pairs);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t s = pairs[2 * i], d = pairs[2 * i + 1];
    if (s < 0 || s >= num_slots)
      fail(Code::invalid_argument, "pairs[%lld]: source slot %lld is not in [0, num_blocks * block_size = %lld)",
           (long long)i, (long long)s, (long long)num_slots);
    if (d < 0 || d >= num_slots)
      fail(Code::invalid_argument, "pairs[%lld]: destination slot %lld is not in [0, num_blocks * block_size = %lld)",
           (long long)i, (long long)d, (long long)num_slots);
    if (s == d) fail(Code::invalid_argument, "pairs[%lld]: source and destination are both slot %lld", (long long)i, (long long)s);
  }
  // Pair indices by destination: a written-twice slot sits next to its twin, and the writer of a
  // source is found by binary search.
  std::vector<int64_t> by_dst(num_pairs);
  std::iota(by_dst.begin(), by_dst.end(), 0);
  std::sort(by_dst.begin(), by_dst.end(), [&](int64_t a, int64_t b) {
    return pairs[2 * a + 1] != pairs[2 * b + 1] ? pairs[2 * a + 1] < pairs[2 * b + 1] : a < b;
  });
  for (size_t i = 1; i < by_dst.size(); ++i)
    if (pairs[2 * by_dst[i] + 1] == pairs[2 * by_dst[i - 1] + 1])
      fail(Code::invalid_argument, "destination slot %lld is written twice (pairs[%lld] and pairs[%lld])",
           (long long)pairs[2 * by_dst[i] + 1], (long long)by_dst[i - 1], (long long)by_dst[i]);
  std::vector<int64_t> parent(num_pairs);
  std::vector<uint8_t> reads_earlier_write(num_pairs, 0);
  std::iota(parent.begin(), parent.end(), 0);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t src = pairs[2 * i];
    auto it = std::lower_bound(by_dst.begin(), by_dst.end(), src,
                               [&](int64_t p, int64_t slot) { return pairs[2 * p + 1] < slot; });
    if (it == by_dst.end() || pairs[2 * *it + 1] != src) continue;
    reads_earlier_write[size_t(i)] = *it < i;
    const int64_t a = find_root(parent, i), b = find_root(parent, *it);
    if (a != b) parent[size_t(std::max(a, b))] = std::min(a, b);
  }
  // Groups in order of their first pair, pairs in their given order within a group.
  std::vector<int64_t> order(num_pairs), root(num_pairs);
  for (int64_t i = 0; i < n; ++i) root[size_t(i)] = find_root(parent, i);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return root[size_t(a)] < root[size_t(b)]; });
  SlotCopy s;
  s.pairs.resize(size_t(2 * n));
  s.group_start.push_back(0);
  for (int64_t k = 0; k < n; ++k) {
    const int64_t i = order[size_t(k)];
    s.pairs[size_t(2 * k)] = pairs[2 * i];
    s.pairs[size_t(2 * k + 1)] = pairs[2 * i + 1];
    if (k > 0 && root[size_t(i)] != root[size_t(order[size_t(k - 1)])]) s.group_start.push_back(int32_t(k));
  }
  if (n > 0) s.group_start.push_back(int32_t(n));
  for (size_t g = 0; g + 1 < s.group_start.size(); ++g) {
    const int64_t size = s.group_start[g + 1] - s.group_start[g];
    bool in_order = true;
    for (int32_t k = s.group_start[g]; k < s.group_start[g + 1]; ++k)
      in_order = in_order && !reads_earlier_write[size_t(order[size_t(k)])];
    s.in_order.push_back(in_order ? 1 : 0);
    if (size > kMaxSlotGroup)
      fail(Code::invalid_argument, "pairs: %lld pairs starting with pairs[%lld] are linked through their slots (one reads "
           "a slot another writes), more than the %lld one group may hold", (long long)size,
           (long long)order[size_t(s.group_start[g])], (long long)kMaxSlotGroup);
    s.largest_group = std::max(s.largest_group, size);
  }
  return s;
}

}  // namespace kern
}  // namespace kvb
