package process

import (
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"

	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

// Terminal runs a command on a pseudo-terminal instead of pipes (Options.Terminal): an
// interactive terminal. The command is the leader of a session of its own with the
// terminal as its controlling terminal, so the line discipline does what a terminal does —
// echo, line editing, ^C to SIGINT for the foreground process group, SIGWINCH on a resize.
type Terminal struct {
	// Size is the window's size at the start.
	Size WindowSize
	// Input is what the caller types, in order; closed when no more will come (the command
	// goes on).
	Input <-chan []byte
	// Resize delivers the window's new sizes.
	Resize <-chan WindowSize
	// Output receives what the terminal shows as it comes. A write that blocks holds the
	// command back (the terminal's buffer fills), so memory stays bounded.
	Output io.Writer
}

// WindowSize is a terminal window's size in character cells.
type WindowSize struct{ Rows, Columns uint16 }

// openTerminal opens a pseudo-terminal pair: pty, the side the helper reads and writes, and
// tty, the command's, both close-on-exec (the command gets tty as its descriptors 0..2).
func openTerminal(size WindowSize) (pty, tty *os.File, err error) {
	fd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("opening a pseudo-terminal: %w", err)
	}
	// Non-blocking, so that the runtime's poller serves it: a Close ends a blocked read
	// or write, and reads take deadlines.
	pty = os.NewFile(uintptr(fd), "/dev/ptmx")
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		pty.Close()
		return nil, nil, fmt.Errorf("unlocking the pseudo-terminal: %w", err)
	}
	if err := setSize(pty, size); err != nil {
		pty.Close()
		return nil, nil, err
	}
	tty, err = peer(fd)
	if err != nil {
		pty.Close()
		return nil, nil, err
	}
	return pty, tty, nil
}

// peer opens the terminal side of the pseudo-terminal whose other side is fd: through the
// descriptor itself where the kernel can (TIOCGPTPEER, Linux 4.13), so no path is looked up
// in a /dev the workload may share; else by its number under /dev/pts.
func peer(fd int) (*os.File, error) {
	r, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.TIOCGPTPEER, uintptr(unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC))
	if errno == 0 {
		return os.NewFile(r, "pty"), nil
	}
	n, err := unix.IoctlGetUint32(fd, unix.TIOCGPTN)
	if err != nil {
		return nil, fmt.Errorf("the pseudo-terminal's number: %w", err)
	}
	name := fmt.Sprintf("/dev/pts/%d", n)
	f, err := os.OpenFile(name, os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, fmt.Errorf("opening the pseudo-terminal's other side: %w", err)
	}
	return f, nil
}

// setSize sets the window size of the terminal whose helper side is pty; the kernel sends
// SIGWINCH to its foreground process group when it changed.
func setSize(pty *os.File, size WindowSize) error {
	rc, err := pty.SyscallConn()
	if err != nil {
		return err
	}
	var ioctlErr error
	err = rc.Control(func(fd uintptr) {
		ioctlErr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: size.Rows, Col: size.Columns})
	})
	if err == nil {
		err = ioctlErr
	}
	if err != nil {
		return fmt.Errorf("setting the terminal's size: %w", err)
	}
	return nil
}

// startTerminal starts the command on a new pseudo-terminal (see Terminal) and sets its
// input going; its output is copied once the command's start is reported (command.follow).
func startTerminal(l launch, t *Terminal) (*command, error) {
	pty, tty, err := openTerminal(t.Size)
	if err != nil {
		return nil, err
	}
	restore := preferAsOOMVictim()
	proc, err := os.StartProcess(l.program, l.argv, &os.ProcAttr{
		Dir:   l.dir,
		Env:   l.env,
		Files: []*os.File{tty, tty, tty},
		// Setsid makes it the leader of a session (and of a process group of its own id,
		// which the kills address); Setctty gives it the terminal, its descriptor 0.
		Sys: &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0, Pdeathsig: syscall.SIGKILL},
	})
	restore()
	if err == nil {
		preferChildAsOOMVictim(proc.Pid)
	}
	tty.Close() // the command holds it; the last close makes the pty's reads end
	if err != nil {
		pty.Close()
		return nil, err
	}
	shown := &shown{w: t.Output}
	c := &command{
		proc: proc, pid: proc.Pid,
		outR:   pty,
		stdout: shown, stderr: none{},
		copied:    make(chan struct{}, 2),
		exited:    make(chan unix.WaitStatus, 1),
		allReaped: make(chan struct{}),
	}
	c.copied <- struct{}{} // no second stream
	go typeInto(pty, t.Input, c.allReaped)
	go resizeOn(pty, t.Resize, c.allReaped)
	go c.reapChildren()
	return c, nil
}

// typeInto writes the caller's input to the terminal until the command's tree is gone (or
// the terminal closed under a blocked write).
func typeInto(pty *os.File, input <-chan []byte, done <-chan struct{}) {
	for {
		select {
		case <-done:
			return
		case b, ok := <-input:
			if !ok {
				input = nil // the caller's input ended: wait for the end
				continue
			}
			if _, err := pty.Write(b); err != nil {
				return
			}
		}
	}
}

// resizeOn applies the window's new sizes until the command's tree is gone.
func resizeOn(pty *os.File, sizes <-chan WindowSize, done <-chan struct{}) {
	for {
		select {
		case <-done:
			return
		case s := <-sizes:
			if setSize(pty, s) != nil {
				return
			}
		}
	}
}

// shown passes what a terminal shows on and counts it; nothing is kept.
type shown struct {
	w     io.Writer
	total atomic.Uint64
}

func (s *shown) Write(p []byte) (int, error) {
	n, err := s.w.Write(p)
	s.total.Add(uint64(n))
	return n, err
}

func (s *shown) Captured() *executionv1.CapturedOutput {
	return &executionv1.CapturedOutput{TotalBytes: s.total.Load()}
}

// none is the stream a terminal does not have: its output and errors are one.
type none struct{}

func (none) Write(p []byte) (int, error) { return len(p), nil }

func (none) Captured() *executionv1.CapturedOutput { return &executionv1.CapturedOutput{} }
