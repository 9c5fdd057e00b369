"""Empty, and never imported: where Python would cache this module's code,
``hostjob.boot.codepack`` keeps its pack, so that pip removes the pack with the package and
every install puts a real ``.pyc`` in its place (see there)."""
