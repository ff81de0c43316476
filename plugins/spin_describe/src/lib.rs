//! Test plugin `spin_describe`: `describe()` spins until the host stops it at the plugin's
//! CPU budget, so the plugin is refused after that long. It shows that a slow plugin
//! delays only its own tools while the others serve.

use dsh_plugin::{Tool, Tools};

struct SpinDescribe;

impl Tools for SpinDescribe {
    fn tools() -> Vec<Tool> {
        let mut spins: u64 = 0;
        loop {
            spins = std::hint::black_box(spins.wrapping_add(1));
        }
    }
}

dsh_plugin::export!(tool: SpinDescribe);
