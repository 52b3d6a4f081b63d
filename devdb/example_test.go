package devdb_test

import (
	"context"
	"fmt"
	"log"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurehq/tenure/devdb"
)

// Open gives a program the database of DATABASE_URL, or a private cluster
// when it is unset; db.URL is then what the program would have read from
// DATABASE_URL.
func ExampleOpen() {
	ctx := context.Background()
	db, err := devdb.Open(ctx)
	if err != nil {
		log.Fatal(err) // set DATABASE_URL, or install PostgreSQL
	}
	defer db.Close()
	// fmt.Println("tenure:", db) says where the data go, e.g.
	// "tenure: database test on 127.0.0.1:5432 as postgres (DATABASE_URL)".

	pool, err := pgxpool.New(ctx, db.URL)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	var answer int
	if err := pool.QueryRow(ctx, "SELECT 6 * 7").Scan(&answer); err != nil {
		log.Fatal(err)
	}
	fmt.Println(answer)
	// Output: 42
}
