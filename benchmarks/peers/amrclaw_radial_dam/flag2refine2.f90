! Refinement flags from the undivided difference of the depth: a cell is flagged when
! the jump of h across any of its four faces exceeds tolsp (flag2refine_tol), i.e.
!   max(|h(i+1,j)-h(i,j)|, |h(i,j)-h(i-1,j)|, |h(i,j+1)-h(i,j)|, |h(i,j)-h(i,j-1)|) > tolsp
! -- the per-cell form of forestpy's indicator_undivided_difference(field=0).
! Ghost values are filled before this is called, so faces on a patch edge count too.
! Cells already decided (e.g. by regions) are left as they are.
subroutine flag2refine2(mx, my, mbc, mbuff, meqn, maux, xlower, ylower, dx, dy, t, &
                        level, tolsp, q, aux, amrflags)
    use amr_module, only: DOFLAG, UNSET
    implicit none
    integer, intent(in) :: mx, my, mbc, meqn, maux, level, mbuff
    real(kind=8), intent(in) :: xlower, ylower, dx, dy, t, tolsp
    real(kind=8), intent(in) :: q(meqn, 1-mbc:mx+mbc, 1-mbc:my+mbc)
    real(kind=8), intent(inout) :: aux(maux, 1-mbc:mx+mbc, 1-mbc:my+mbc)
    real(kind=8), intent(inout) :: amrflags(1-mbuff:mx+mbuff, 1-mbuff:my+mbuff)

    integer :: i, j
    real(kind=8) :: jump

    do j = 1, my
        do i = 1, mx
            if (amrflags(i, j) /= UNSET) cycle
            jump = max(abs(q(1, i+1, j) - q(1, i, j)), abs(q(1, i, j) - q(1, i-1, j)), &
                       abs(q(1, i, j+1) - q(1, i, j)), abs(q(1, i, j) - q(1, i, j-1)))
            if (jump > tolsp) amrflags(i, j) = DOFLAG
        end do
    end do
end subroutine flag2refine2
