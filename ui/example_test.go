package ui_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/tenurehq/tenure/internal/exampledb"
	"github.com/tenurehq/tenure/operator"
	"github.com/tenurehq/tenure/ui"
)

// The UI mounted under /tenure/ of the application's own mux, read-only.
func ExampleNew() {
	pool, schema, closeDB := exampledb.Open() // a pool and a migrated schema
	defer closeDB()
	op, err := operator.New(pool, operator.WithSchema(schema))
	if err != nil {
		panic(err)
	}
	h, err := ui.New(ui.Config{Operator: op, HidePayloads: true})
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/tenure/", http.StripPrefix("/tenure", h))

	w := httptest.NewRecorder()
	mux.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/tenure/failures", nil))
	fmt.Println(w.Code, w.Header().Get("Content-Type"))
	// Output:
	// 200 text/html; charset=utf-8
}
