"""Runs leave the database: old day partitions archived to S3-compatible object storage.

Modules, each imported on its own (the store imports ``model`` only, so nothing here pulls in
boto3 or the store by being imported):

- ``model``: ``ArchivedRun`` and ``ArchivedAttempt``, what an archive holds;
- ``keys``: object keys from dates and digests only, never from a user's name;
- ``codec``: Avro object container files (``schemas/run_archive.avsc``) and their checksum;
- ``ports``: ``ObjectStore``, the port to object storage;
- ``objects``: its S3 adapter (boto3) and ``S3Settings``;
- ``archiver``: ``Archiver.run_once``: export, upload, verify, drop;
- ``finder``: archived runs of a job, read back through the manifests.

docs/runs.md ("Retention and archive") describes the layout and the guarantees.
"""
