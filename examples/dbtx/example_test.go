package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
)

// sellOne is the right order in plain database/sql: lock, begin, read,
// write with the fence, commit, and release last. Every statement runs on
// the lock's context, so a lost lock rolls the transaction back.
func sellOne(ctx context.Context, locker dlock.Locker, db *sql.DB, sku string) error {
	lock, err := locker.Acquire(ctx, "stock:"+sku)
	if err != nil {
		return err
	}
	defer lock.Release(ctx) // after the commit: the next holder reads committed data

	lctx := lock.Context() // ends when the lock is lost
	tx, err := db.BeginTx(lctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() // a no-op after Commit

	var qty int64
	if err := tx.QueryRowContext(lctx, `SELECT qty FROM stock WHERE id = $1`, sku).Scan(&qty); err != nil {
		return err
	}
	res, err := tx.ExecContext(lctx,
		`UPDATE stock SET qty = $1, fence = $2 WHERE id = $3 AND fence < $2`, qty-1, lock.Fence(), sku)
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		return ErrStale // a newer holder wrote the row: this lock had ended
	}
	return tx.Commit()
}

// Four sales at once, of a stock of four, on SQLite: each takes the lock,
// then begins; commits, then releases. None is lost.
func Example() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	locker := dlock.MustNew(rdb)
	defer locker.Close(ctx)

	dir, err := os.MkdirTemp("", "dbtx-example-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	store, err := OpenSQLite(filepath.Join(dir, "stock.db"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.Close()
	if err := store.Reset(ctx, "sku-1", 4); err != nil {
		fmt.Println(err)
		return
	}

	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			if err := sellOne(ctx, locker, store.DB(), "sku-1"); err != nil {
				fmt.Println(err)
			}
		})
	}
	wg.Wait()
	qty, err := store.Qty(ctx, "sku-1")
	fmt.Println("left:", qty, err)
	// Output: left: 0 <nil>
}
