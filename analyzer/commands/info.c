/* info.c: `memsnap info SNAPSHOT.db...`: what a snapshot is (its meta table, devices,
 * counts), without analysing the history. */
#include <stdio.h>

#include "commands.h"
#include "report/report.h"

static void print_count(ms_snapshot *s, const char *label, ms_count_what what) {
  int64_t n = ms_count_rows(s, what);
  if (n >= 0) printf("  %-18s %lld\n", label, (long long)n);
}

/* A device, and what the driver still had free on it at the last out-of-memory error, when there
 * was one (an imported PyTorch snapshot says nothing else about the device's memory). */
static int print_device(const ms_device_row *r, void *arg) {
  ms_snapshot *s = arg;
  char b[32], t[32];
  if (r->total_bytes >= 0) ms_format_bytes(r->total_bytes, b, sizeof b);
  else snprintf(b, sizeof b, "memory unknown");
  printf("  %-18s %d: %s, %s\n", "device", r->device, r->name[0] ? r->name : "name unknown", b);
  ms_event oom;
  if (ms_last_oom(s, r->device, &oom) == 1) {
    ms_format_bytes((int64_t)oom.address, b, sizeof b);
    ms_format_ns(oom.time_ns - s->first_ns, t, sizeof t);
    printf("  %-18s %s free on the device at the out-of-memory error at %s\n", "", b, t);
  }
  return 0;
}

static int cmd_info(int argc, char **argv) {
  if (argc < 2) return ms_usage_error(&ms_info_command, "no snapshot given");
  for (int i = 1; i < argc; i++)
    if (argv[i][0] == '-' && argv[i][1]) {
      return ms_unknown_option(&ms_info_command, argv[i], i + 1 == argc);
    }
  int rc = 0;
  for (int i = 1; i < argc; i++) {
    ms_snapshot s;
    if (ms_open(&s, argv[i]) != 0) {
      fprintf(stderr, "error: %s\n", s.error);
      rc = 1;
      continue;
    }
    ms_events_extent(&s); /* no pass reads the events here */
    char t[32];
    ms_format_ns(s.last_ns - s.first_ns, t, sizeof t);
    printf("%s\n", argv[i]);
    printf("  %-18s %d\n", "format", s.format_version);
    printf("  %-18s memsnap %s\n", "written by", s.tool_version);
    char process[sizeof s.host + 64];
    ms_process_text(&s, process, sizeof process);
    printf("  %-18s %s\n", "process", process);
    printf("  %-18s %s\n", "command line", s.command_line);
    printf("  %-18s %s, %lld device(s)\n", "backend", s.backend, (long long)s.device_count);
    printf("  %-18s %s\n", "stacks", s.stacks_mode);
    printf("  %-18s %lld kept of %lld recorded (%lld dropped; ring of %lld)\n", "events", (long long)s.nevents,
           (long long)s.recorded, (long long)s.dropped, (long long)s.max_entries);
    printf("  %-18s %s\n", "history spans", t);
    ms_devices_each(&s, print_device, &s); /* unreadable: the devices read */
    print_count(&s, "segments", MS_COUNT_SEGMENTS);
    print_count(&s, "  of them external", MS_COUNT_EXTERNAL_SEGMENTS);
    print_count(&s, "live blocks", MS_COUNT_ALLOCATED_BLOCKS);
    print_count(&s, "marks", MS_COUNT_MARKS);
    print_count(&s, "ranges", MS_COUNT_RANGES);
    print_count(&s, "distinct stacks", MS_COUNT_STACKS);
    ms_close(&s);
  }
  return rc ? rc : ms_output_status();
}

const ms_command ms_info_command = {"info", cmd_info,
     "memsnap info SNAPSHOT.db... what a snapshot holds",
     "  SNAPSHOT.db...      snapshots: format, process, recording, events, devices, segments, blocks\n", false};
