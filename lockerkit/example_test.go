package lockerkit_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/lockerkit"
)

// A Locker of one's own reads the caller's options by the Client's rules,
// and refuses bad input with the Client's errors, before it sends anything.
func ExampleReadAcquireOptions() {
	s, err := lockerkit.ReadAcquireOptions("order:42", lockerkit.DefaultTTLBounds,
		dlock.WithTTL(30*time.Second), dlock.WithWait(0), dlock.WithOwner("billing-7"))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(s.TTL, s.Wait, s.Renew, s.Owner)

	_, err = lockerkit.ReadAcquireOptions("order:42", lockerkit.DefaultTTLBounds, dlock.WithTTL(10))
	fmt.Println(errors.Is(err, dlock.ErrInvalidTTL))
	fmt.Println(err)
	// Output:
	// 30s 0s true billing-7
	// true
	// dlock: acquire "order:42": invalid ttl: 10ns is below the minimum 10ms
}

// The busy error of a Locker of one's own has the Client's shape: it
// matches dlock.ErrNotObtained and says how long the holder's lease runs.
func ExampleNewNotObtainedError() {
	err := &dlock.Error{Op: "acquire", Name: "order:42",
		Err: lockerkit.NewNotObtainedError("order:42", 1500*time.Millisecond, nil)}
	var busy *dlock.NotObtainedError
	fmt.Println(errors.Is(err, dlock.ErrNotObtained), errors.As(err, &busy) && busy.HolderTTL == 1500*time.Millisecond)
	// Output:
	// true true
}
