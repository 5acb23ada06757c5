/* tablescan.h: the rows of one SQLite table read straight from the file's pages (tablescan.c). */
#ifndef MEMSNAP_TABLESCAN_H
#define MEMSNAP_TABLESCAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MS_TABLESCAN_COLUMNS 11 /* values kept per row (the events table's columns) */

typedef struct ms_tablescan ms_tablescan;

/* One row: its rowid and its first MS_TABLESCAN_COLUMNS values, NULL ones 0 with their bit set
 * in `nulls` (bit c for column c; columns a record lacks are NULL). */
typedef struct ms_tablescan_row {
  int64_t rowid;
  int64_t values[MS_TABLESCAN_COLUMNS];
  uint32_t nulls;
} ms_tablescan_row;

/* Opens the table whose b-tree starts at page `root` of the database file at path and lists its
 * leaf pages in rowid order. Returns NULL when the file cannot be read this way (not a database,
 * a damaged tree, out of memory): the caller reads through SQLite then. */
ms_tablescan *ms_tablescan_open(const char *path, uint32_t root);
size_t ms_tablescan_leaves(const ms_tablescan *t);
size_t ms_tablescan_page_size(const ms_tablescan *t);
/* Calls fn for each row of leaves [from, to), in order, reading each page into `page` (one page
 * size of the caller's memory: threads may read different ranges at once). Returns 0, fn's
 * non-zero value when it stops, or -1 at an anomaly (a value that is not an integer or NULL, a
 * record that overflows its page, a damaged page): rows before it were given to fn. */
int ms_tablescan_rows(const ms_tablescan *t, size_t from, size_t to, uint8_t *page,
                      int (*fn)(const ms_tablescan_row *row, void *arg), void *arg);
void ms_tablescan_close(ms_tablescan *t);

#endif
