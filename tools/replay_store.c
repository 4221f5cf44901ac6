/* replay_store.c - the model store of `kvblock replay --store-blocks N` (see replay_store.h): an
   open-addressing set of store keys (linear probing, backward-shift deletion) threaded on an LRU list. */
#include "replay_store.h"

#include <stdlib.h>
#include <string.h>

#include "util.h"

#define NIL UINT32_MAX

struct replay_store {
  uint64_t cap;          /* blocks kept */
  kvb_store_key* keys;   /* [cap] entry e's key */
  uint32_t *prev, *next; /* [cap] LRU list of entries, head = least recent */
  uint32_t head, tail;
  uint64_t used, evictions;
  uint32_t* slots;       /* [nslots] entry or NIL; nslots a power of two >= 2 cap */
  uint64_t nslots;
  int exclusive;         /* a get takes the key out (the block moves up a tier) */
  uint64_t* tickets;     /* gets started since the last poll */
  size_t nt, tcap;
};

static uint64_t home(const replay_store* s, const kvb_store_key* k) {
  return (k->lo ^ (k->hi * 0x9E3779B97F4A7C15ULL)) & (s->nslots - 1);
}

static uint64_t find_slot(const replay_store* s, const kvb_store_key* k) { /* slot of k, or its empty slot */
  uint64_t i = home(s, k);
  while (s->slots[i] != NIL && (s->keys[s->slots[i]].lo != k->lo || s->keys[s->slots[i]].hi != k->hi))
    i = (i + 1) & (s->nslots - 1);
  return i;
}

static void lru_unlink(replay_store* s, uint32_t e) {
  if (s->prev[e] != NIL) s->next[s->prev[e]] = s->next[e];
  else s->head = s->next[e];
  if (s->next[e] != NIL) s->prev[s->next[e]] = s->prev[e];
  else s->tail = s->prev[e];
}

static void lru_push(replay_store* s, uint32_t e) { /* most recent */
  s->prev[e] = s->tail;
  s->next[e] = NIL;
  if (s->tail != NIL) s->next[s->tail] = e;
  else s->head = e;
  s->tail = e;
}

static void erase_slot(replay_store* s, uint64_t i) { /* backward shift: no tombstones */
  uint64_t j = i;
  s->slots[i] = NIL;
  for (;;) {
    uint64_t h;
    j = (j + 1) & (s->nslots - 1);
    if (s->slots[j] == NIL) return;
    h = home(s, &s->keys[s->slots[j]]);
    if (((j - h) & (s->nslots - 1)) >= ((j - i) & (s->nslots - 1))) { /* j's home is not in (i, j] */
      s->slots[i] = s->slots[j];
      s->slots[j] = NIL;
      i = j;
    }
  }
}

/* Removes entry e (at slot i); the last entry moves into its place so that entries stay [0, used). */
static void remove_entry(replay_store* s, uint32_t e, uint64_t i) {
  uint32_t last = (uint32_t)s->used - 1;
  lru_unlink(s, e);
  erase_slot(s, i);
  if (e != last) {
    s->slots[find_slot(s, &s->keys[last])] = e;
    s->keys[e] = s->keys[last];
    s->prev[e] = s->prev[last];
    s->next[e] = s->next[last];
    if (s->prev[e] != NIL) s->next[s->prev[e]] = e;
    else s->head = e;
    if (s->next[e] != NIL) s->prev[s->next[e]] = e;
    else s->tail = e;
  }
  s->used--;
}

static int rs_lookup(void* u, const kvb_store_key* keys, size_t n, size_t* found) {
  replay_store* s = (replay_store*)u;
  size_t k = 0;
  uint64_t i;
  /* Found keys count as used: the puts of the host blocks that the same allocation evicts to stage its
     gets must not push them out of a full store before their gets (a model store's choice; the manager
     would recompute them, counted as failed gets). */
  while (k < n && s->slots[i = find_slot(s, &keys[k])] != NIL) {
    lru_unlink(s, s->slots[i]);
    lru_push(s, s->slots[i]);
    k++;
  }
  *found = k;
  return 0;
}

static int rs_put(void* u, const kvb_store_key* key, int32_t host_block) {
  replay_store* s = (replay_store*)u;
  uint64_t i = find_slot(s, key);
  uint32_t e;
  (void)host_block;
  if (s->slots[i] != NIL) { /* already stored: just used */
    lru_unlink(s, s->slots[i]);
    lru_push(s, s->slots[i]);
    return 0;
  }
  if (s->used == s->cap) { /* drop the least recent */
    e = s->head;
    lru_unlink(s, e);
    erase_slot(s, find_slot(s, &s->keys[e]));
    s->evictions++;
    i = find_slot(s, key);
  } else {
    e = (uint32_t)s->used++;
  }
  s->keys[e] = *key;
  s->slots[i] = e;
  lru_push(s, e);
  return 0;
}

static int rs_get(void* u, const kvb_store_key* key, int32_t host_block, uint64_t ticket) {
  replay_store* s = (replay_store*)u;
  uint64_t i = find_slot(s, key);
  (void)host_block;
  if (s->slots[i] == NIL) return -1; /* dropped since the lookup (cannot happen within one allocate) */
  if (s->exclusive) {
    remove_entry(s, s->slots[i], i);
  } else {
    lru_unlink(s, s->slots[i]);
    lru_push(s, s->slots[i]);
  }
  if (s->nt == s->tcap) {
    s->tcap = s->tcap ? 2 * s->tcap : 64;
    s->tickets = (uint64_t*)realloc(s->tickets, s->tcap * sizeof *s->tickets);
    if (!s->tickets) return -1;
  }
  s->tickets[s->nt++] = ticket;
  return 0;
}

static int rs_poll(void* u, kvb_store_completion* done, size_t cap, size_t* num) {
  replay_store* s = (replay_store*)u;
  size_t n = s->nt < cap ? s->nt : cap, i;
  for (i = 0; i < n; i++) {
    memset(&done[i], 0, sizeof done[i]);
    done[i].ticket = s->tickets[s->nt - 1 - i];
  }
  s->nt -= n;
  *num = n;
  return 0;
}

replay_store* replay_store_attach(kvb_manager* m, uint64_t blocks, uint32_t block_size, int exclusive) {
  replay_store* s = (replay_store*)calloc(1, sizeof *s);
  kvb_store st;
  kvb_store_namespace ns;
  kvb_status rc;
  uint64_t e;
  if (!s) return NULL;
  s->cap = blocks;
  s->exclusive = exclusive;
  s->nslots = 2;
  while (s->nslots < 2 * blocks) s->nslots *= 2;
  s->keys = (kvb_store_key*)xmalloc((size_t)blocks * sizeof *s->keys);
  s->prev = (uint32_t*)xmalloc((size_t)blocks * sizeof *s->prev);
  s->next = (uint32_t*)xmalloc((size_t)blocks * sizeof *s->next);
  s->slots = (uint32_t*)xmalloc((size_t)s->nslots * sizeof *s->slots);
  for (e = 0; e < s->nslots; e++) s->slots[e] = NIL;
  s->head = s->tail = NIL;
  kvb_store_init(&st);
  st.user = s;
  st.lookup = rs_lookup;
  st.put = rs_put;
  st.get = rs_get;
  st.poll = rs_poll;
  kvb_store_namespace_init(&ns);
  ns.block_size = block_size;
  ns.num_layers = ns.num_kv_heads = ns.head_dim = 1; /* keys only: any layout */
  if ((rc = kvb_manager_set_store(m, &st, &ns)) != KVB_OK) {
    lib_error("kvb_manager_set_store", rc);
    replay_store_free(s, NULL);
    return NULL;
  }
  return s;
}

void replay_store_free(replay_store* s, kvb_manager* m) {
  if (!s) return;
  if (m) kvb_manager_set_store(m, NULL, NULL);
  free(s->keys);
  free(s->prev);
  free(s->next);
  free(s->slots);
  free(s->tickets);
  free(s);
}

uint64_t replay_store_size(const replay_store* s) { return s->used; }
uint64_t replay_store_evictions(const replay_store* s) { return s->evictions; }
