-- A DML revision: it commits atomically with its history row.
INSERT INTO counters (name, value) VALUES ('visits', 0);
