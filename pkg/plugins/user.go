package plugins

import (
	"fmt"
	"os/user"
	"strconv"
	"syscall"
)

// credential looks up the user plugins run as, by name or numeric uid, with
// its primary group and no supplementary groups: a plugin gets nothing the
// daemon's groups could read.
func credential(name string) (*syscall.Credential, error) {
	u, err := user.Lookup(name)
	if err != nil {
		var uerr error
		if u, uerr = user.LookupId(name); uerr != nil {
			return nil, fmt.Errorf("plugin user %q (MMCP_PLUGINS_USER): no such user on this machine; create it or name another", name)
		}
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("plugin user %q: uid %q is not a number", name, u.Uid)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("plugin user %q: gid %q is not a number", name, u.Gid)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, nil
}
