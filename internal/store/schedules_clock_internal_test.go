package store

import (
	"go/ast"
	"go/parser"
	"go/token"
	"testing"
)

// TestSchedules_DecideByTheDatabasesClockAlone: nothing that decides a
// schedule's ticks reads the machine's clock (time.Now, Since, Until): due-
// ness, a pass's now, the catch-up grace, the next wait and a backfill's
// range all come from the database's now(), so that a worker whose clock is
// off (by an hour, say) decides the same ticks as the others. The process-
// level proof, worker processes whose clocks are an hour off, is
// internal/chaos's TestSchedules_AWorkersClockOffByAnHourDecidesNoExtraAndNoMissingTick;
// this holds the code to what that proof relies on, at every build.
func TestSchedules_DecideByTheDatabasesClockAlone(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "schedules.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	ast.Inspect(f, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		if x, ok := sel.X.(*ast.Ident); ok && x.Name == "time" {
			switch sel.Sel.Name {
			case "Now", "Since", "Until":
				t.Errorf("schedules.go reads the machine's clock: time.%s", sel.Sel.Name)
			}
		}
		return true
	})
}
