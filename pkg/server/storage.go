package server

import (
	"errors"
	"net/http"

	"github.com/mmcpd/mmcpd/pkg/store"
)

// storageProblem maps a store error that is about the storage rather than a
// bug to an answer the operator can act on: 507 storage_full when the disk
// (SQLite's SQLITE_FULL) is full, 503 storage_lost when the database file
// was deleted or replaced under the daemon. ran says whether a turn already
// ran (its tools may have acted) before the error, so the message can say
// so. Neither is retryable: both need someone to act first.
func storageProblem(err error, ran bool) (status int, code, msg string, ok bool) {
	outcome := "nothing was done"
	if ran {
		outcome = "the turn ran (its tools may have acted) but could not be recorded"
	}
	switch {
	case errors.Is(err, store.ErrStorageLost):
		return http.StatusServiceUnavailable, "storage_lost",
			"the session database file was deleted or replaced while mmcpd was running, so nothing can be saved any more: " + outcome + "; restart mmcpd", true
	case store.IsFull(err):
		return http.StatusInsufficientStorage, "storage_full",
			"the disk holding the session database (MMCP_DATA_DIR) is full: " + outcome + "; free some space", true
	}
	return 0, "", "", false
}

// storageLost is the message of /readyz once the database file is gone.
const storageLost = "the session database file was deleted or replaced while mmcpd was running, so nothing can be saved any more: restart mmcpd"
