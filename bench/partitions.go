package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// With -partitions N, Tenure's steps and attempts are N range partitions of
// the run ID (a UUIDv7, so a range of run IDs is a range of the runs'
// creation times): one a day, the last open-ended (today's, tomorrow's and
// every later run's), the first everything before. It is a prototype of the
// layout of issue 25 (history at 10^9 attempts), made after the migrations
// and before the history, to measure what a workload pays for the
// partitions a schema keeps attached (planning, executor start-up and
// pruning of every statement that reads or writes the two tables) before
// the layout is built: the partition size follows from it.
//
// The views that read the two tables are made again over the partitioned
// ones (a view binds to its tables, not to their names), and each partition
// gets the tables' storage parameters (fillfactor 50: the update that ends
// an attempt or a step stays on its page).

// sqlPartition turns steps and attempts of {schema} into %d partitions.
const sqlPartition = `
DO $$
DECLARE
    n integer := %d;
    views text[];
    defs text[];
    t text;
    lo text;
    hi text;
    d date;
    opts text;
BEGIN
    WITH RECURSIVE v(oid, depth) AS (
        SELECT DISTINCT r.ev_class, 1 FROM pg_depend x JOIN pg_rewrite r ON r.oid = x.objid
        WHERE x.refobjid IN ('{schema}.steps'::regclass, '{schema}.attempts'::regclass)
          AND r.ev_class NOT IN ('{schema}.steps'::regclass, '{schema}.attempts'::regclass)
        UNION
        SELECT r.ev_class, v.depth + 1 FROM v JOIN pg_depend x ON x.refobjid = v.oid JOIN pg_rewrite r ON r.oid = x.objid
        WHERE r.ev_class <> v.oid)
    SELECT array_agg(c.relname ORDER BY m.depth, c.oid), array_agg(pg_get_viewdef(c.oid) ORDER BY m.depth, c.oid)
    INTO views, defs
    FROM (SELECT v.oid, max(v.depth) AS depth FROM v GROUP BY 1) AS m JOIN pg_class c ON c.oid = m.oid;
    FOR i IN REVERSE coalesce(cardinality(views), 0)..1 LOOP
        EXECUTE format('DROP VIEW {schema}.%%I', views[i]);
    END LOOP;
    FOREACH t IN ARRAY ARRAY['steps', 'attempts'] LOOP
        EXECUTE format('ALTER TABLE {schema}.%%I RENAME TO %%I', t, t || '_plain');
        EXECUTE format('CREATE TABLE {schema}.%%I (LIKE {schema}.%%I INCLUDING ALL) PARTITION BY RANGE (run_id)', t, t || '_plain');
        -- (The storage parameters, fillfactor above all, are each partition's.)
        SELECT ' WITH (' || array_to_string(c.reloptions, ', ') || ')' INTO opts
        FROM pg_class c WHERE c.oid = format('{schema}.%%I', t || '_plain')::regclass;
        FOR i IN 0..n - 1 LOOP
            d := current_date - (n - 2) + i;
            lo := CASE WHEN i = 0 THEN 'MINVALUE' ELSE quote_literal({schema}_bench_uuid(d - 1)) END;
            hi := CASE WHEN i = n - 1 THEN 'MAXVALUE' ELSE quote_literal({schema}_bench_uuid(d)) END;
            EXECUTE format('CREATE TABLE {schema}.%%I PARTITION OF {schema}.%%I FOR VALUES FROM (%%s) TO (%%s)%%s',
                           t || '_p' || i, t, lo, hi, coalesce(opts, ''));
        END LOOP;
        EXECUTE format('INSERT INTO {schema}.%%I SELECT * FROM {schema}.%%I', t, t || '_plain');
        EXECUTE format('DROP TABLE {schema}.%%I', t || '_plain');
    END LOOP;
    CREATE TRIGGER steps_delete_attempts AFTER DELETE ON {schema}.steps
        REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION {schema}._delete_attempts_of_steps();
    FOR i IN 1..coalesce(cardinality(views), 0) LOOP
        EXECUTE format('CREATE VIEW {schema}.%%I AS %%s', views[i], defs[i]);
    END LOOP;
END
$$`

// sqlBenchUUID is the lowest UUIDv7 of a day: its first 48 bits the day's
// start in Unix milliseconds, the rest zero.
const sqlBenchUUID = `
CREATE FUNCTION {schema}_bench_uuid(d date) RETURNS uuid LANGUAGE sql IMMUTABLE AS $$
    SELECT (substr(h, 1, 8) || '-' || substr(h, 9, 4) || '-0000-0000-000000000000')::uuid
    FROM (SELECT lpad(to_hex((extract(epoch FROM d::timestamp) * 1000)::bigint), 12, '0') AS h) AS x
$$`

// partition makes steps and attempts of schema n partitions (nothing when n
// is 0).
func partition(ctx context.Context, pool *pgxpool.Pool, schema string, n int) error {
	if n <= 0 {
		return nil
	}
	q := pgx.Identifier{schema}.Sanitize()
	fn := pgx.Identifier{schema, "bench_uuid"}.Sanitize()
	sql := func(s string) string {
		return strings.ReplaceAll(strings.ReplaceAll(s, "{schema}_bench_uuid", fn), "{schema}", q)
	}
	if _, err := pool.Exec(ctx, sql(sqlBenchUUID)); err != nil {
		return fmt.Errorf("partitions: %w", err)
	}
	if _, err := pool.Exec(ctx, sql(fmt.Sprintf(sqlPartition, n))); err != nil {
		return fmt.Errorf("partitions: %w", err)
	}
	return nil
}
