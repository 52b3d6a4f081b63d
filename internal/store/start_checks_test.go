package store_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/tenurehq/tenure/internal/store"
)

// TestStartChecks_SayWhatIsWrongWithAStart: the checks sdk.Start and
// operator.Start share, case by case.
func TestStartChecks_SayWhatIsWrongWithAStart(t *testing.T) {
	ok := store.NewRun{Workflow: "w", Queue: "default", Input: []byte(`"12345"`)}
	for _, c := range []struct {
		name string
		edit func(*store.NewRun)
		is   error
		want string
	}{
		{"valid", func(*store.NewRun) {}, nil, ""},
		{"at the limit", func(r *store.NewRun) { r.Input = []byte(`"123456"`) }, nil, ""},
		{"no queue", func(r *store.NewRun) { r.Queue = "" }, nil, "empty queue name"},
		{"negative delay", func(r *store.NewRun) { r.Delay = -time.Second }, nil, "negative delay -1s"},
		{"too large", func(r *store.NewRun) { r.Input = []byte(`"1234567"`) }, store.ErrPayloadTooLarge, "input is 9 bytes, limit 8: payload too large"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := ok
			c.edit(&r)
			err := r.Check(8)
			if c.want == "" && err != nil || c.want != "" && (err == nil || err.Error() != c.want) || c.is != nil && !errors.Is(err, c.is) {
				t.Fatalf("Check: %v; want %q", err, c.want)
			}
		})
	}

	id := uuid.New()
	for _, c := range []struct {
		name string
		ins  store.Inserted
		is   error
		want string
	}{
		{"created", store.Inserted{ID: id, Workflow: "w", Created: true}, nil, ""},
		{"the same start", store.Inserted{ID: id, Workflow: "w"}, nil, ""},
		{"another workflow", store.Inserted{ID: id, Workflow: "v"}, store.ErrWorkflowMismatch, `start w: key "k" already names run ` + id.String() + ` of workflow "v"`},
		{"another input", store.Inserted{ID: id, Workflow: "w", OtherInput: true}, store.ErrKeyConflict, `start w: key "k" already names run ` + id.String() + `, started with another input`},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.ins.Check("w", "k")
			if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.HasPrefix(err.Error(), c.want) || !errors.Is(err, c.is)) {
				t.Fatalf("Inserted.Check: %v; want %q", err, c.want)
			}
		})
	}
}
