#!/usr/bin/env bash
# manpage.sh MEMSNAP VERSION: writes the memsnap(1) man page on stdout, made from the tool's own
# help (`memsnap help`, `memsnap help COMMAND` for each command it lists, `memsnap options`), so
# the page says what the installed tool says. `make install` runs it.
set -euo pipefail
cli=$1
version=$2
# Text as roff shows it verbatim: backslashes escaped, a leading dot or quote neutralised.
verbatim() { sed -e 's/\\/\\e/g' -e "s/^\([.']\)/\\\\\&\1/"; }
commands=$("$cli" help | sed -n 's/^  memsnap \([a-z][a-z-]*\).*/\1/p' | grep -v '^help$' | awk '!seen[$0]++')
cat <<HEAD
.TH MEMSNAP 1 "" "memsnap $version" "User Commands"
.SH NAME
memsnap \- read, analyze and convert CUDA memory snapshots written by libmemsnap
.SH SYNOPSIS
.nf
HEAD
"$cli" help | verbatim
cat <<'BODY'
.fi
.SH DESCRIPTION
libmemsnap is a CUDA caching allocator (PyTorch's pluggable allocator, or called from C) that
records what it does, with the stacks of every allocation, and writes snapshots as SQLite files.
\fBmemsnap\fR reads them: \fBanalyze\fR answers where the peak was, which sites grow, what caused
an out-of-memory error and which frees were invalid, as text, JSON or an offline HTML page.
.PP
Exit status: 0 on success, 1 on an error, 2 on a usage error.
.SH COMMANDS
BODY
for c in $commands; do
  printf '.SS %s\n.nf\n' "$c"
  "$cli" help "$c" | verbatim
  printf '.fi\n'
done
printf '.SH ENVIRONMENT\nThe library reads these variables (name, default, meaning):\n.nf\n'
"$cli" options | verbatim
cat <<'TAIL'
.fi
.SH FILES
The documents installed with memsnap (README.md, docs/*.md) describe the snapshot format, the
JSON of \fBanalyze --json\fR and the report page.
.SH SEE ALSO
\fBpkg-config\fR(1): \fBpkg-config --cflags --libs memsnap\fR builds a C or CUDA program against
the installed library.
TAIL
