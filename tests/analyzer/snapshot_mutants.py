"""snapshot_mutants.py: what the analyzer's and the importer's hostile-value tests share: copies of
a good snapshot, each changed by one SQL statement (a statement SQLite refuses leaves the copy as
it was), for checking that the CLI answers every one without crashing."""
import shutil
import sqlite3


def mutants(good, directory, statements, prefix="mut"):
    """Yields (statement, path) for a copy of `good` in `directory` changed by each statement."""
    for i, statement in enumerate(statements):
        path = "%s/%s%d.db" % (directory, prefix, i)
        shutil.copy(good, path)
        c = sqlite3.connect(path)
        try:
            c.execute(statement)
            c.commit()
        except sqlite3.Error:
            pass
        c.close()
        yield statement, path
