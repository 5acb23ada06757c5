/* snapshot_schema.h: the tables and event kinds of a snapshot file (docs/snapshot-format.md),
 * shared by the recorder's writer (snapshot.c) and the CLI's importer (analyzer/cmd_import.c),
 * so that both write the same file. */
#ifndef MEMSNAP_SNAPSHOT_SCHEMA_H
#define MEMSNAP_SNAPSHOT_SCHEMA_H

#define MEMSNAP_FORMAT_VERSION 1

/* Creates every table of an empty snapshot and sets its format version. Columns added after
 * version 1's first files (segments.expandable, pool_id0, pool_id1) are at the end of their table:
 * (and segments.source, library) readers of old files find them missing (see docs/snapshot-format.md). */
__attribute__((unused)) static const char memsnap_schema_sql[] =
    "PRAGMA user_version = 1;"
    "CREATE TABLE meta(key TEXT PRIMARY KEY, value) WITHOUT ROWID;"
    "CREATE TABLE options(name TEXT PRIMARY KEY, value TEXT) WITHOUT ROWID;"
    "CREATE TABLE devices(device INTEGER PRIMARY KEY, name TEXT, total_bytes INTEGER, free_bytes INTEGER,"
    " cap_bytes INTEGER);"
    "CREATE TABLE stats(device INTEGER, key TEXT, value INTEGER, PRIMARY KEY(device, key)) WITHOUT ROWID;"
    "CREATE TABLE segments(id INTEGER PRIMARY KEY, device INTEGER, address INTEGER, size INTEGER, pool TEXT,"
    " stream INTEGER, expandable INTEGER, pool_id0 INTEGER, pool_id1 INTEGER, source TEXT, library TEXT);"
    "CREATE TABLE blocks(id INTEGER PRIMARY KEY, segment_id INTEGER, address INTEGER, size INTEGER,"
    " requested_size INTEGER, state TEXT, stack_id INTEGER);"
    "CREATE TABLE event_kinds(id INTEGER PRIMARY KEY, name TEXT);"
    "CREATE TABLE events(id INTEGER PRIMARY KEY, time_ns INTEGER, kind INTEGER, device INTEGER, stream INTEGER,"
    " address INTEGER, size INTEGER, requested_size INTEGER, extra INTEGER, thread INTEGER, stack_id INTEGER);"
    "CREATE TABLE labels(id INTEGER PRIMARY KEY, text TEXT);"
    "CREATE TABLE marks(event_id INTEGER PRIMARY KEY, time_ns INTEGER, label_id INTEGER, thread INTEGER,"
    " stack_id INTEGER);"
    "CREATE TABLE ranges(id INTEGER PRIMARY KEY, label_id INTEGER, thread INTEGER, depth INTEGER,"
    " start_ns INTEGER, end_ns INTEGER, stack_id INTEGER);"
    "CREATE TABLE stacks(id INTEGER PRIMARY KEY, depth INTEGER);"
    "CREATE TABLE stack_frames(stack_id INTEGER, position INTEGER, frame_id INTEGER,"
    " PRIMARY KEY(stack_id, position)) WITHOUT ROWID;"
    "CREATE TABLE frames(id INTEGER PRIMARY KEY, kind TEXT, name TEXT, file TEXT, line INTEGER, module TEXT,"
    " pc INTEGER, offset INTEGER, inlined INTEGER);";

/* event_kinds: the name of each kind, by id. segment_map and segment_unmap are the pages of
 * expandable segments (and, in async mode, the stream-ordered pool's growth). */
enum { MEMSNAP_EVENT_KINDS = 13 };
__attribute__((unused)) static const char *const memsnap_event_kind_names[MEMSNAP_EVENT_KINDS] = {
    NULL, "alloc", "free_requested", "free_completed", "segment_alloc", "segment_free", "oom", "snapshot",
    "mark", "range_push", "range_pop", "segment_map", "segment_unmap"};

/* Inserts one segment, naming its columns (both writers use it). */
__attribute__((unused)) static const char memsnap_insert_segment_sql[] =
    "INSERT INTO segments(id, device, address, size, pool, stream, expandable, pool_id0, pool_id1, source, library) "
    "VALUES(?,?,?,?,?,?,?,?,?,?,?)";

#endif
