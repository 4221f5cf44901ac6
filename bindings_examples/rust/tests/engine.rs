//! The engine loop through the safe wrapper: prefix hits, decode, free, out-of-blocks, errors.
use kvblock::{KvbError, Manager};

const BLOCK: usize = 16;

#[test]
fn engine_loop() -> Result<(), KvbError> {
    let m = Manager::new(8, BLOCK as u32)?;
    let prompt: Vec<i64> = (1000..1040).collect(); // 2 full blocks + 8 tokens
    assert_eq!(m.allocate(1, &prompt)?, 0);
    m.commit(1, prompt.len())?;
    for t in 0..30 {
        assert!(m.can_append(1, 1)?);
        m.append(1, &[t])?;
        m.commit(1, 1)?;
    }
    let table = m.block_table(1)?;
    assert_eq!(table.len(), 5);
    assert_eq!(m.num_free_blocks()?, 3);

    let second: Vec<i64> = prompt[..32].iter().copied().chain([5, 6, 7]).collect();
    assert_eq!(m.allocate(2, &second)?, 32);
    assert_eq!(m.block_table(2)?[..2], table[..2]);
    m.commit(2, second.len() - 32)?;

    m.free(1)?;
    m.free(2)?;
    m.check_invariants()?;
    let s = m.stats()?;
    assert_eq!((s.num_seqs, s.used_blocks, s.free_blocks), (0, 0, 8));
    assert_eq!(s.hit_tokens, 32);
    assert_eq!(s.query_tokens, (prompt.len() + second.len()) as u64);
    assert!(s.cached_free_blocks >= 2);
    Ok(())
}

#[test]
fn out_of_blocks() -> Result<(), KvbError> {
    let m = Manager::new(8, BLOCK as u32)?;
    let first: Vec<i64> = (0..6 * BLOCK as i64).collect();
    m.allocate(1, &first)?;
    m.commit(1, first.len())?;
    let other: Vec<i64> = (5000..5000 + 3 * BLOCK as i64).collect();
    let err = m.allocate(2, &other).unwrap_err();
    assert_eq!(err.status, KvbError::OUT_OF_BLOCKS);
    assert_eq!(err.name, "KVB_ERR_OUT_OF_BLOCKS");
    assert!(!err.message.is_empty());
    assert_eq!(m.num_free_blocks()?, 2, "a failed call changes nothing");

    let mut appended = 0;
    while m.can_append(1, 1)? {
        m.append(1, &[appended])?;
        m.commit(1, 1)?;
        appended += 1;
    }
    assert_eq!(appended, 2 * BLOCK as i64);
    assert_eq!(
        m.append(1, &[0]).unwrap_err().status,
        KvbError::OUT_OF_BLOCKS
    );
    m.check_invariants()
}

#[test]
fn error_path() -> Result<(), KvbError> {
    let m = Manager::new(8, BLOCK as u32)?;
    let err = m.commit(42, 1).unwrap_err();
    assert_eq!(err.status, KvbError::NO_SUCH_SEQUENCE);
    assert!(err.message.contains("42"), "{err}");
    assert!(err.to_string().starts_with("KVB_ERR_NO_SUCH_SEQUENCE: "));
    m.allocate(7, &[1, 2, 3])?;
    assert_eq!(
        m.allocate(7, &[1, 2, 3]).unwrap_err().status,
        KvbError::SEQUENCE_EXISTS
    );
    assert_eq!(
        Manager::new(0, 16).err().map(|e| e.status),
        Some(KvbError::INVALID_ARGUMENT)
    );
    // Errors compose with `?` and Box<dyn Error>.
    let boxed: Box<dyn std::error::Error> = Box::new(m.free(99).unwrap_err());
    assert!(boxed.to_string().contains("KVB_ERR_NO_SUCH_SEQUENCE"));
    Ok(())
}

#[test]
fn shared_across_threads() -> Result<(), KvbError> {
    let m = Manager::new(64, BLOCK as u32)?;
    std::thread::scope(|s| {
        for id in 0..4i64 {
            let m = &m;
            s.spawn(move || {
                let tokens: Vec<i64> = (0..40).collect();
                let cached = m.allocate(id, &tokens).unwrap();
                m.commit(id, tokens.len() - cached).unwrap();
            });
        }
    });
    assert_eq!(m.stats()?.num_seqs, 4);
    m.check_invariants()
}

#[test]
fn non_cacheable_tokens() -> Result<(), KvbError> {
    let config = kvblock::Config {
        num_blocks: 8,
        non_cacheable_tokens: vec![-5],
        ..Default::default()
    };
    let m = Manager::with_config(&config)?;
    let mut prompt: Vec<i64> = (0..40).collect();
    prompt[3] = -5; // an image placeholder in the first block: nothing of this prompt is cached
    let cached = m.allocate(1, &prompt)?;
    m.commit(1, prompt.len() - cached)?;
    assert_eq!(m.allocate(2, &prompt)?, 0);
    m.check_invariants()
}
