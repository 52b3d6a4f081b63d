module github.com/tenurehq/tenure/cmd/tenure

go 1.26.0

require (
	github.com/google/uuid v1.6.0
	github.com/jackc/pgx/v5 v5.12.0
	github.com/spf13/cobra v1.10.2
	github.com/tenurehq/tenure v0.0.0
)

require (
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/spf13/pflag v1.0.9 // indirect
	go.uber.org/goleak v1.3.0 // indirect
	golang.org/x/sync v0.23.0 // indirect
	golang.org/x/text v0.42.0 // indirect
)

// The CLI builds against the core module of this checkout. go install
// github.com/tenurehq/tenure/cmd/tenure@version refuses a module whose go.mod
// has a replace directive, so a release of the CLI drops this line and requires
// the tagged release of the core module instead (docs/compatibility.md).
replace github.com/tenurehq/tenure => ../..
