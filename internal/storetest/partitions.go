package storetest

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Backdate makes schema's steps and attempts look as if migration 22 ran
// days ago: steps_0 and attempts_0 up to that day (UTC), then a partition
// a day up to two days from now. The two tables must be empty.
func Backdate(ctx context.Context, pool *pgxpool.Pool, schema string, days int) error {
	q := pgx.Identifier{schema}.Sanitize()
	sql := func(s string) string { return strings.ReplaceAll(s, "{schema}", q) }
	if _, err := pool.Exec(ctx, sql(`DO $$
	DECLARE
	    p record;
	BEGIN
	    FOR p IN SELECT c.relname, i.inhparent::regclass AS parent FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
	             WHERE i.inhparent IN ('{schema}.steps'::regclass, '{schema}.attempts'::regclass) AND c.relname !~ '_default$' LOOP
	        EXECUTE format('ALTER TABLE %s DETACH PARTITION {schema}.%I', p.parent, p.relname);
	        EXECUTE format('DROP TABLE {schema}.%I', p.relname);
	    END LOOP;
	END $$`)); err != nil {
		return fmt.Errorf("backdate: %w", err)
	}
	today := time.Now().UTC().Truncate(24 * time.Hour)
	bound := func(d int) (string, error) {
		var b string
		err := pool.QueryRow(ctx, sql(`SELECT {schema}._history_bound($1)::text`), today.AddDate(0, 0, d)).Scan(&b)
		return b, err
	}
	for _, tbl := range []string{"steps", "attempts"} {
		lo, err := bound(-days)
		if err != nil {
			return err
		}
		if _, err := pool.Exec(ctx, sql(fmt.Sprintf(`CREATE TABLE {schema}.%s_0 PARTITION OF {schema}.%s FOR VALUES FROM (MINVALUE) TO ('%s') WITH (fillfactor = 50)`,
			tbl, tbl, lo))); err != nil {
			return fmt.Errorf("backdate: %w", err)
		}
		for d := -days; d <= 2; d++ {
			hi, err := bound(d + 1)
			if err != nil {
				return err
			}
			name := tbl + "_" + today.AddDate(0, 0, d).Format("20060102")
			if _, err := pool.Exec(ctx, sql(fmt.Sprintf(`CREATE TABLE {schema}.%s PARTITION OF {schema}.%s FOR VALUES FROM ('%s') TO ('%s') WITH (fillfactor = 50)`,
				name, tbl, lo, hi))); err != nil {
				return fmt.Errorf("backdate: %w", err)
			}
			lo = hi
		}
	}
	return nil
}

// DayID is the SQL of an ID of a run created at noon (UTC) days ago, the
// i-th of tag's (an expression over i): the IDs of Backdate's partitions.
func DayID(days int, tag string) string {
	return fmt.Sprintf(`overlay({schema}._history_bound(date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' - %d * interval '1 day' + interval '12 hours')::text
		PLACING lpad(to_hex(i + abs(hashtext(%s)) %% 100000 * 1000 + 100000000), 12, '0') FROM 25)::uuid`, days, pgQuote(tag))
}

func pgQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
