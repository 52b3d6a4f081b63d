package pgtest_test

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/tenurehq/tenure/internal/pgtest"
)

// A failover: a client commits through URL, the primary crashes, the
// standby is promoted, and the client's next connection through URL reaches
// it, with the commit, and writes there.
func ExampleStartReplicated() {
	ctx := context.Background()
	rep, err := pgtest.StartReplicated(true) // a commit waits for the standby
	if err != nil {
		fmt.Println(err)
		return
	}
	defer rep.Stop()
	exec := func(sql string) {
		conn, err := pgx.Connect(ctx, rep.URL()) // a new connection finds the primary
		if err != nil {
			fmt.Println(err)
			return
		}
		defer conn.Close(ctx)
		tag, err := conn.Exec(ctx, sql)
		fmt.Println(tag, err)
	}

	exec("CREATE TABLE kv (k int)")
	exec("INSERT INTO kv VALUES (1)")
	if err := rep.StopPrimary("immediate"); err != nil {
		fmt.Println(err)
		return
	}
	if err := rep.Promote(); err != nil {
		fmt.Println(err)
		return
	}
	exec("INSERT INTO kv SELECT count(*) + 1 FROM kv")
	exec("DELETE FROM kv") // both rows are on the promoted standby
	// Output:
	// CREATE TABLE <nil>
	// INSERT 0 1 <nil>
	// INSERT 0 1 <nil>
	// DELETE 2 <nil>
}
