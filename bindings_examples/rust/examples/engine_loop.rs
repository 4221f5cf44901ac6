//! A tiny engine loop on libkvblock: prefill, decode, prefix reuse, the out-of-blocks error, stats.
use kvblock::{KvbError, Manager};

fn main() -> Result<(), KvbError> {
    println!("libkvblock {}", kvblock::version()?);
    let m = Manager::new(8, 16)?;

    let prompt: Vec<i64> = (100..140).collect(); // 40 tokens
    let cached = m.allocate(1, &prompt)?;
    m.commit(1, prompt.len() - cached)?; // prefill: K/V of every uncached token written
    for token in 0..7 {
        m.append(1, &[token])?; // decode: one token per step
        m.commit(1, 1)?;
    }
    println!("seq 1 block table: {:?}", m.block_table(1)?);
    m.free(1)?;

    // A second request with the same 32-token prefix reuses the committed blocks.
    let second: Vec<i64> = prompt[..32].iter().copied().chain([7, 7, 7]).collect();
    println!("seq 2 cached tokens: {}", m.allocate(2, &second)?);

    // The error path: a prompt larger than the pool is an Err carrying status and message.
    let huge: Vec<i64> = (0..1000).collect();
    match m.allocate(3, &huge) {
        Err(e) if e.status == KvbError::OUT_OF_BLOCKS => println!("expected error: {e}"),
        other => panic!("expected OUT_OF_BLOCKS, got {other:?}"),
    }
    println!("{:?}", m.stats()?);
    Ok(())
}
