-- The example app's first revision: one table of named counters.
CREATE TABLE counters (
  name VARCHAR(64) NOT NULL PRIMARY KEY,
  value BIGINT NOT NULL DEFAULT 0
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
