package dlockprom_test

import (
	"context"
	"os"
	"testing"

	"github.com/dlock-go/dlock/internal/redistest"
)

// exampleAddr is the address of the redis-server that the Example functions
// use; TestMain starts it on a free loopback port.
var exampleAddr string

var bg = context.Background()

func TestMain(m *testing.M) {
	os.Exit(redistest.RunMain(m, &exampleAddr))
}
