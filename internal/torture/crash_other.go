//go:build !linux

package torture

import (
	"context"
	"errors"
)

var errCrashLinux = errors.New("torture: the crash fault needs Linux (LD_PRELOAD and /proc/self/fd)")

func crashEnv(context.Context, string) ([]string, string, error) { return nil, "", errCrashLinux }

func cutToFsynced(string) (int64, error) { return 0, errCrashLinux }
