"""The database: the connector and its errors, every SQL statement, init-db's schema,
indexes and grants, partitions, read replicas (hot standbys), uninstall."""
