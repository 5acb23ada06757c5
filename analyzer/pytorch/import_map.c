/* import_map.c: PyTorch's snapshot objects mapped to memsnap's rows (docs/pytorch-snapshots.md,
 * field by field): device trace entries become staged events, segments and their blocks rows of
 * segments and blocks, external annotations ranges (and range_push/range_pop events),
 * allocator_settings rows of options.
 *
 * Every field is read through imp_get_int or imp_get_str, which check its type and range and name
 * the object and the key in the error. The records are taken as their lists receive them
 * (imp_on_append, the reader's hook) and, after the STOP, from what the stream left in the
 * finished tree (imp_take_tree), which also maps device_traces[i] to device i.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pytorch.h"
#include "importer.h"

/* ---- the three kinds of records ----------------------------------------------------------- */

/* a + b, held at the int64 limits (sums of a hostile file's sizes must not overflow). */
static int64_t saturated(int64_t a, int64_t b) {
  int64_t sum;
  return __builtin_add_overflow(a, b, &sum) ? (b > 0 ? INT64_MAX : INT64_MIN) : sum;
}

/* A block's size as PyTorch's allocator rounds a request (the trace holds the request). */
static int64_t rounded(int64_t size) { return size < 512 ? 512 : (size + 511) / 512 * 512; }

static int entry_time(importer *im, const pk_obj *e, const where *w, int64_t *t) {
  if (imp_get_int(im, e, "time_us", w, false, im->last_time, 0, MAX_TIME_US, t) != 0) return -1;
  im->last_time = *t;
  return 0;
}

/* One device_traces entry, appended to `list`. */
static int take_entry(importer *im, pk_obj *list, const pk_obj *e) {
  where w = {"device_traces entry", im->entries, -1};
  if (!list->tag) {
    if (imp_reserve(im, (void **)&im->lists, &im->clists, im->nlists, sizeof *im->lists) != 0) return -1;
    im->lists[im->nlists] = (trace_list){0, 0};
    list->tag = TAG(TAG_LIST, ++im->nlists);
  } else if (TAG_KIND(list->tag) != TAG_LIST || TAG_ID(list->tag) >= LIST_SEGMENTS) {
    return imp_fail(im,
                    "device_traces entry %" PRId64 ": in a list that is also a frames, segments or annotations list",
                    im->entries);
  }
  trace_list *tl = &im->lists[TAG_ID(list->tag) - 1];
  const char *action;
  size_t alen;
  if (imp_get_str(im, e, "action", &w, true, &action, &alen) != 0) return -1;
  int kind = 0;
  for (int k = 1; k < MEMSNAP_EVENT_KINDS; k++)
    if (!ms_event_is_annotation(k) && strcmp(action, memsnap_event_kind_names[k]) == 0)
      kind = k;
  im->entries++;
  if (!kind) { /* an action memsnap has no kind for (a newer PyTorch's): counted, named once */
    if (!im->skipped++) snprintf(im->skipped_action, sizeof im->skipped_action, "%s", action);
    return 0;
  }
  int64_t t, addr = 0, size = 0, stream, stack;
  if (entry_time(im, e, &w, &t) != 0 ||
      imp_get_int(im, e, kind == MS_OOM ? "device_free" : "addr", &w, kind != MS_SNAPSHOT, 0, INT64_MIN, INT64_MAX,
                  &addr) != 0 ||
      imp_get_int(im, e, "size", &w, kind != MS_SNAPSHOT, 0, 0, MAX_SIZE, &size) != 0 ||
      imp_get_int(im, e, "stream", &w, false, 0, INT64_MIN, INT64_MAX, &stream) != 0 ||
      (stack = imp_stack_id(im, pk_dict_get(e, "frames"), &w)) < 0)
    return -1;
  int64_t block = rounded(size), extra = 0;
  switch (kind) {
    case MS_ALLOC: tl->allocated = saturated(tl->allocated, block); break;
    case MS_FREE_COMPLETED: tl->allocated = saturated(tl->allocated, -block); break;
    case MS_SEGMENT_ALLOC:
    case MS_SEGMENT_MAP: tl->reserved = saturated(tl->reserved, size); break;
    case MS_SEGMENT_FREE:
    case MS_SEGMENT_UNMAP: tl->reserved = saturated(tl->reserved, -size); break;
    case MS_OOM: extra = tl->reserved > tl->allocated ? tl->reserved - tl->allocated : 0; break;
    default: break;
  }
  bool blockwise = kind == MS_ALLOC || kind == MS_FREE_REQUESTED || kind == MS_FREE_COMPLETED;
  return imp_stage_event(im, t, kind, TAG_ID(list->tag), stream, addr, blockwise ? block : size, size, extra,
                         kind == MS_OOM, stack);
}

/* One segment with its blocks. */
static int take_segment(importer *im, const pk_obj *s) {
  where w = {"segment", im->segments, -1};
  int64_t device, address, total, stream;
  const char *type;
  size_t tlen;
  if (imp_get_int(im, s, "device", &w, false, 0, 0, MAX_DEVICES - 1, &device) != 0 ||
      imp_get_int(im, s, "address", &w, true, 0, INT64_MIN, INT64_MAX, &address) != 0 ||
      imp_get_int(im, s, "total_size", &w, true, 0, 0, MAX_SIZE, &total) != 0 ||
      imp_get_int(im, s, "stream", &w, false, 0, INT64_MIN, INT64_MAX, &stream) != 0 ||
      imp_get_str(im, s, "segment_type", &w, false, &type, &tlen) != 0)
    return -1;
  const pk_value *blocks = pk_dict_get(s, "blocks");
  if (!pk_is(blocks, PK_LIST)) return imp_field_error(im, &w, "blocks", blocks, "a list");
  int64_t id = ++im->segments;
  sqlite3_bind_int64(im->segment, 1, id);
  sqlite3_bind_int64(im->segment, 2, device);
  sqlite3_bind_int64(im->segment, 3, address);
  sqlite3_bind_int64(im->segment, 4, total);
  /* PyTorch's small pool allocates 2 MiB segments; its segment_type says so when present. */
  bool small = tlen ? strcmp(type, "small") == 0 : total == 2 << 20;
  sqlite3_bind_text(im->segment, 5, small ? "small" : "large", -1, SQLITE_STATIC);
  sqlite3_bind_int64(im->segment, 6, stream);
  /* Expandable segments and private pools (CUDA graphs, MemPool): is_expandable, and a
   * segment_pool_id other than (0, 0). */
  int64_t expandable;
  if (imp_get_int(im, s, "is_expandable", &w, false, 0, 0, 1, &expandable) != 0) return -1;
  sqlite3_bind_int(im->segment, 7, (int)expandable);
  const pk_value *pool_id = pk_dict_get(s, "segment_pool_id");
  bool private_pool = pk_is(pool_id, PK_TUPLE) && pool_id->o->len == 2 && pool_id->o->items[0].kind == PK_INT &&
                      pool_id->o->items[1].kind == PK_INT && (pool_id->o->items[0].i || pool_id->o->items[1].i);
  imp_bind_int_or_null(im->segment, 8, private_pool ? pool_id->o->items[0].i : 0, !private_pool);
  imp_bind_int_or_null(im->segment, 9, private_pool ? pool_id->o->items[1].i : 0, !private_pool);
  if (imp_step(im, im->segment) != 0) return -1;
  int64_t at = address;
  for (size_t i = 0; i < blocks->o->len; i++) {
    w.sub = (int64_t)i;
    const pk_value *bv = &blocks->o->items[i];
    if (!pk_is(bv, PK_DICT)) {
      char buf[96];
      return imp_fail(im, "%s: a %s, expected a dict", imp_where_text(&w, buf, sizeof buf), pk_type_name(bv));
    }
    const pk_obj *b = bv->o;
    int64_t size, requested, baddr, stack;
    const char *state;
    size_t slen;
    if (imp_get_int(im, b, "size", &w, true, 0, 0, MAX_SIZE, &size) != 0 ||
        imp_get_int(im, b, "address", &w, false, at, INT64_MIN, INT64_MAX, &baddr) != 0 ||
        imp_get_str(im, b, "state", &w, true, &state, &slen) != 0 ||
        imp_get_int(im, b, "requested_size", &w, false, size, 0, MAX_SIZE, &requested) != 0 ||
        (stack = imp_stack_id(im, pk_dict_get(b, "frames"), &w)) < 0)
      return -1;
    const char *mstate = strcmp(state, "active_allocated") == 0      ? "allocated"
                         : strcmp(state, "active_pending_free") == 0 ? "pending_free"
                         : strcmp(state, "inactive") == 0            ? "free"
                                                                     : NULL;
    if (!mstate) {
      char buf[96];
      return imp_fail(im, "%s: unknown state '%.40s'", imp_where_text(&w, buf, sizeof buf), state);
    }
    bool freed = strcmp(mstate, "free") == 0;
    sqlite3_bind_int64(im->block, 1, id);
    sqlite3_bind_int64(im->block, 2, baddr);
    sqlite3_bind_int64(im->block, 3, size);
    sqlite3_bind_int64(im->block, 4, freed ? 0 : requested);
    sqlite3_bind_text(im->block, 5, mstate, -1, SQLITE_STATIC);
    imp_bind_int_or_null(im->block, 6, stack, freed || stack == 0);
    if (imp_step(im, im->block) != 0) return -1;
    im->blocks++;
    at = (int64_t)((uint64_t)baddr + (uint64_t)size); /* the next block's, when it does not say */
    if (pk_is(bv, PK_DICT)) pk_forget(im->r, bv->o);
  }
  pk_forget(im->r, blocks->o);
  return 0;
}

/* One external annotation ({stage: START|END, name, device, time_us}): a range. */
static int take_annotation(importer *im, const pk_obj *a) {
  where w = {"external_annotations entry", im->annotations++, -1};
  const char *stage, *name;
  size_t slen, nlen;
  int64_t device, t;
  if (imp_get_str(im, a, "stage", &w, true, &stage, &slen) != 0 ||
      imp_get_str(im, a, "name", &w, false, &name, &nlen) != 0 ||
      imp_get_int(im, a, "device", &w, false, 0, 0, MAX_DEVICES - 1, &device) != 0 || entry_time(im, a, &w, &t) != 0)
    return -1;
  bool start = strcmp(stage, "START") == 0;
  if (!start && strcmp(stage, "END") != 0) {
    char buf[96];
    return imp_fail(im, "%s: 'stage' is '%.40s', expected START or END", imp_where_text(&w, buf, sizeof buf), stage);
  }
  int64_t label = imp_label_id(im, name);
  if (label < 0) return -1;
  if ((size_t)device >= im->nranges) {
    size_t n = (size_t)device + 1;
    device_ranges *g = realloc(im->ranges, sizeof *g * n);
    if (!g) return imp_fail(im, "out of memory");
    memset(g + im->nranges, 0, sizeof *g * (n - im->nranges));
    im->ranges = g;
    im->nranges = n;
  }
  device_ranges *open = &im->ranges[device];
  if (start) {
    if (imp_reserve(im, (void **)&open->v, &open->cap, open->n, sizeof *open->v) != 0) return -1;
    sqlite3_bind_int64(im->range_open, 1, label);
    sqlite3_bind_int64(im->range_open, 2, (int64_t)open->n);
    sqlite3_bind_int64(im->range_open, 3, t);
    if (imp_step(im, im->range_open) != 0) return -1;
    open->v[open->n] = (open_range){sqlite3_last_insert_rowid(im->db), label, (int64_t)open->n};
    open->n++;
    return imp_stage_event(im, t, MS_RANGE_PUSH, 0, 0, 0, 0, (int64_t)open->n - 1, label, true, 0);
  }
  /* END closes the innermost open range of its name; ranges opened inside it and never closed
     stay open. An END whose START came before recording matches nothing. The search looks at
     the 64 innermost open ranges (record_function nests a few deep): a file of unmatched ENDs
     must not cost a scan of everything open each. */
  for (size_t k = open->n; k-- > 0 && open->n - k <= 64;)
    if (open->v[k].label == label) {
      sqlite3_bind_int64(im->range_close, 1, t);
      sqlite3_bind_int64(im->range_close, 2, open->v[k].row);
      if (imp_step(im, im->range_close) != 0) return -1;
      open->n = k;
      return imp_stage_event(im, t, MS_RANGE_POP, 0, 0, 0, 0, (int64_t)k, 0, false, 0);
    }
  im->unmatched_ends++;
  return 0;
}

/* Marks `list` as the one list that gives segments (which: LIST_SEGMENTS) or annotations
 * (LIST_ANNOTATIONS). A second such list, or one that holds something else too, is an error;
 * finish() checks that it is the top level's 'segments' (or 'external_annotations'). */
static int claim_list(importer *im, pk_obj *list, int64_t which, const char *what) {
  int64_t tag = TAG(TAG_LIST, which);
  if (list->tag == tag) return 0;
  if (list->tag) return imp_fail(im, "%s in a list that holds something else", what);
  if (im->claimed[which - LIST_SEGMENTS]) return imp_fail(im, "%s in more than one list", what);
  im->claimed[which - LIST_SEGMENTS] = true;
  list->tag = tag;
  return 0;
}

/* The reader's hook: takes entries, segments and annotations as their lists receive them. */
int imp_on_append(pk_reader *r, pk_obj *list, const pk_value *item, void *ctx) {
  (void)r;
  importer *im = ctx;
  if (!pk_is(item, PK_DICT) || !pk_dict_small(item->o)) return 0; /* PyTorch's have a dozen keys */
  const pk_obj *d = item->o;
  if (pk_dict_get(d, "action")) return take_entry(im, list, d) ? -1 : 1;
  if (pk_dict_get(d, "blocks") && pk_dict_get(d, "total_size"))
    return claim_list(im, list, LIST_SEGMENTS, "a segment") || take_segment(im, d) ? -1 : 1;
  if (pk_dict_get(d, "stage") && pk_dict_get(d, "time_us"))
    return claim_list(im, list, LIST_ANNOTATIONS, "an annotation") || take_annotation(im, d) ? -1 : 1;
  return 0;
}

/* ---- allocator settings ------------------------------------------------------------------- */

/* A scalar as the options table keeps it: Python's spelling, so export can tell the types. */
static bool scalar_text(const pk_value *v, char *out, size_t len) {
  switch (v->kind) {
    case PK_NONE: snprintf(out, len, "None"); return true;
    case PK_BOOL: snprintf(out, len, "%s", v->i ? "True" : "False"); return true;
    case PK_INT: snprintf(out, len, "%" PRId64, v->i); return true;
    case PK_FLOAT:
      if (isnan(v->f) || isinf(v->f)) {
        snprintf(out, len, "%s", isnan(v->f) ? "nan" : v->f > 0 ? "inf" : "-inf");
        return true;
      }
      for (int prec = 1; prec <= 17; prec++) { /* the shortest that reads back the same, as Python's repr */
        snprintf(out, len, "%.*g", prec, v->f);
        if (strtod(out, NULL) == v->f) break;
      }
      if (!strpbrk(out, ".en")) strncat(out, ".0", len - strlen(out) - 1);
      return true;
    default:
      if (!pk_is(v, PK_STR)) return false;
      pk_utf8_sanitize(v->o->s, v->o->len);
      snprintf(out, len, "%s", v->o->s);
      return true;
  }
}

static int put_option(importer *im, const char *name, const char *value) {
  sqlite3_bind_text(im->option, 1, name, -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(im->option, 2, value, -1, SQLITE_TRANSIENT);
  return imp_step(im, im->option);
}

/* allocator_settings: every setting as "pytorch.KEY" (a dict's items as "pytorch.KEY.SUBKEY"),
 * and the MEMSNAP_* options that mean the same. */
static int take_settings(importer *im, const pk_value *settings) {
  if (!settings || settings->kind == PK_NONE) return 0;
  if (!pk_is(settings, PK_DICT)) return imp_fail(im, "'allocator_settings' is a %s, expected a dict", pk_type_name(settings));
  const pk_obj *d = settings->o;
  char name[300], value[4096];
  for (size_t i = 0; i + 1 < d->len; i += 2) {
    const pk_value *k = &d->items[i], *v = &d->items[i + 1];
    if (!pk_is(k, PK_STR)) continue;
    pk_utf8_sanitize(k->o->s, k->o->len);
    if (scalar_text(v, value, sizeof value)) {
      snprintf(name, sizeof name, "pytorch.%.200s", k->o->s);
      if (put_option(im, name, value) != 0) return -1;
    } else if (pk_is(v, PK_DICT)) {
      size_t o = 0;
      value[o++] = '[';
      for (size_t j = 0; j + 1 < v->o->len; j += 2) {
        char sub[256];
        const pk_value *sk = &v->o->items[j], *sv = &v->o->items[j + 1];
        if (!scalar_text(sk, sub, sizeof sub)) continue;
        snprintf(name, sizeof name, "pytorch.%.200s.%.80s", k->o->s, sub);
        char sval[256];
        if (!scalar_text(sv, sval, sizeof sval)) continue;
        if (put_option(im, name, sval) != 0) return -1;
        o += (size_t)snprintf(value + o, sizeof value - o, "%s%s:%s", o > 1 ? "," : "", sub, sval);
        if (o >= sizeof value - 2) o = sizeof value - 2;
      }
      snprintf(value + o, sizeof value - o, "]");
      if (strcmp(k->o->s, "roundup_power2_divisions") == 0 && put_option(im, "MEMSNAP_ROUNDUP_POWER2_DIVISIONS", value))
        return -1;
    }
  }
  /* The equivalents, in memsnap's units (options.c). */
  const pk_value *v;
  if ((v = pk_dict_get(d, "max_split_size")) && v->kind == PK_INT) {
    if (v->i < 0 || v->i >= ((int64_t)1 << 60)) snprintf(value, sizeof value, "unlimited");
    else snprintf(value, sizeof value, "%" PRId64, v->i >> 20);
    if (put_option(im, "MEMSNAP_MAX_SPLIT_SIZE_MB", value) != 0) return -1;
  }
  if ((v = pk_dict_get(d, "max_non_split_rounding_size")) && v->kind == PK_INT && v->i >= 0) {
    snprintf(value, sizeof value, "%" PRId64, v->i >> 20);
    if (put_option(im, "MEMSNAP_MAX_NON_SPLIT_ROUNDING_MB", value) != 0) return -1;
  }
  if ((v = pk_dict_get(d, "garbage_collection_threshold")) && (v->kind == PK_FLOAT || v->kind == PK_INT)) {
    snprintf(value, sizeof value, "%g", v->kind == PK_FLOAT ? v->f : (double)v->i);
    if (put_option(im, "MEMSNAP_GARBAGE_COLLECTION_THRESHOLD", value) != 0) return -1;
  }
  if ((v = pk_dict_get(d, "roundup_power2_divisions")) && v->kind == PK_INT) {
    snprintf(value, sizeof value, "%" PRId64, v->i);
    if (put_option(im, "MEMSNAP_ROUNDUP_POWER2_DIVISIONS", value) != 0) return -1;
  }
  return 0;
}

/* ---- the finished tree -------------------------------------------------------------------- */

/* Takes what the stream left in list `key` of the root (dicts of a kind), with `take`. */
static int take_rest(importer *im, const pk_obj *root, const char *key, int (*take)(importer *, const pk_obj *)) {
  const pk_value *l = pk_dict_get(root, key);
  if (!l || l->kind == PK_NONE) return 0;
  if (!pk_is(l, PK_LIST)) return imp_fail(im, "'%s' is a %s, expected a list", key, pk_type_name(l));
  for (size_t i = 0; i < l->o->len; i++) {
    if (!pk_is(&l->o->items[i], PK_DICT)) return imp_fail(im, "'%s' holds a %s, expected dicts", key, pk_type_name(&l->o->items[i]));
    if (take(im, l->o->items[i].o) != 0) return -1;
  }
  return 0;
}

/* device_traces[i] is device i: records which staged list each is (and takes any entries the
 * stream left in them). */
static int map_devices(importer *im, const pk_obj *root) {
  const pk_value *traces = pk_dict_get(root, "device_traces");
  size_t n = 0;
  if (traces && traces->kind != PK_NONE) {
    if (!pk_is(traces, PK_LIST)) return imp_fail(im, "'device_traces' is a %s, expected a list", pk_type_name(traces));
    n = traces->o->len;
  }
  if (n > MAX_DEVICES) return imp_fail(im, "'device_traces' has %zu lists: more devices than %d", n, MAX_DEVICES);
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(im->db, "INSERT INTO temp.stage_lists VALUES(?,?)", -1, &st, NULL) != SQLITE_OK) return imp_db_fail(im);
  int rc = 0;
  for (size_t i = 0; i < n && rc == 0; i++) {
    pk_value *dv = &traces->o->items[i];
    if (!pk_is(dv, PK_LIST)) {
      rc = imp_fail(im, "device_traces[%zu] is a %s, expected a list", i, pk_type_name(dv));
      break;
    }
    pk_obj *l = dv->o;
    for (size_t k = 0; k < l->len && rc == 0; k++) {
      if (!pk_is(&l->items[k], PK_DICT) || !pk_dict_get(l->items[k].o, "action"))
        rc = imp_fail(im, "device_traces[%zu] holds a %s that is not a trace entry", i, pk_type_name(&l->items[k]));
      else rc = take_entry(im, l, l->items[k].o);
    }
    if (rc == 0 && l->tag) {
      if (TAG_KIND(l->tag) != TAG_LIST || TAG_ID(l->tag) >= LIST_SEGMENTS) {
        rc = imp_fail(im, "device_traces[%zu] is also a frames, segments or annotations list", i);
        break;
      }
      sqlite3_bind_int64(st, 1, TAG_ID(l->tag));
      sqlite3_bind_int64(st, 2, (int64_t)i);
      rc = imp_step(im, st);
    }
  }
  sqlite3_finalize(st);
  if (rc) return -1;
  return 0;
}

int imp_take_tree(importer *im, const pk_value *root) {
  if (pk_is(root, PK_LIST)) { /* an old form: the segments alone */
    for (size_t i = 0; i < root->o->len; i++)
      if (!pk_is(&root->o->items[i], PK_DICT) || take_segment(im, root->o->items[i].o) != 0)
        return im->failed ? -1
                          : imp_fail(im, "not a PyTorch memory snapshot: the top level is a list of something other "
                                         "than segments");
  } else if (!pk_is(root, PK_DICT) || (!pk_dict_get(root->o, "segments") && !pk_dict_get(root->o, "device_traces"))) {
    return imp_fail(im, "not a PyTorch memory snapshot: the top level is a %s without 'segments' or 'device_traces'",
                    pk_type_name(root));
  } else if (take_rest(im, root->o, "segments", take_segment) != 0 ||
             take_rest(im, root->o, "external_annotations", take_annotation) != 0 || map_devices(im, root->o) != 0 ||
             take_settings(im, pk_dict_get(root->o, "allocator_settings")) != 0) {
    return -1;
  }
  /* Segments and annotations taken as they came must have come from the top level's lists. */
  static const char *const keys[2] = {"segments", "external_annotations"};
  for (int w = 0; w < 2 && pk_is(root, PK_DICT); w++) {
    const pk_value *l = pk_dict_get(root->o, keys[w]);
    if (im->claimed[w] && (!pk_is(l, PK_LIST) || l->o->tag != TAG(TAG_LIST, LIST_SEGMENTS + w)))
      return imp_fail(im, "%s found outside the top level's '%s' list", w ? "annotations" : "segments", keys[w]);
  }
  return 0;
}
